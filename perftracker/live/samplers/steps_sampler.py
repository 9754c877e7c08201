"""Step times of an attached job, from the perftracker hook's spool or from the job's log.

`StepsSampler` copies every new step record into `steps/rank-<r>.jsonl` (and the `StepFeed` under --watch)
and keeps `ctx.progress` current. Sources: the hook's spool, `--job-log`'s framework lines, else the job's
own output files (`attach/job_outputs.py`); a (rank, step) is written once. No source: one note.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from perftracker.collectors.steps import parse_step_lines
from perftracker.formats.framework_steps import StepLineParser
from perftracker.formats.log_lines import line_time_ns
from perftracker.hooks import spool_dir
from perftracker.live.attach.job_outputs import find_job_outputs
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import LineTail
from perftracker.live.samplers.step_state import StepFeed
from perftracker.rundir import append_jsonl, step_file

HISTORY_BYTES = 16 * 1024 * 1024
LOG_BACKLOG_BYTES = 1024 * 1024
RESCAN_S = 5.0
HOOK_LINE = "import perftracker.hooks; perftracker.hooks.install()"
CLOCK_SLACK_S = 2.0  # a process's start time is derived from the boot time, which /proc gives in whole seconds


def hooked_by(spool: Path, rank: int, pid: int) -> bool:
    """Did worker `pid` install the hook: `<spool>/ranks/rank-<r>.json` names it and was written after that process
    started (less CLOCK_SLACK_S)? Pids repeat across runs in containers, so a pid alone is not enough."""
    try:
        info = json.loads((spool / "ranks" / f"rank-{rank}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("pid") != pid:
        return False
    installed_ns = info.get("installed_ns")
    if not isinstance(installed_ns, int):
        return True  # written by an older hook, without the time: the pid is all there is to go by
    try:
        started_s = psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return False
    return installed_ns / 1e9 >= started_s - CLOCK_SLACK_S


@dataclass
class _HookedRank:
    rank: int
    tail: LineTail
    target: Path | None  # None: the hook writes into the run directory itself


@dataclass
class _LogSource:
    """One text file read for step lines, with its own parser (formats by difference keep state per file)."""

    tail: LineTail
    parser: StepLineParser
    source: str  # "log" (--job-log) | "job-output" (found on the job's descriptors)
    records: int = 0


@dataclass(slots=True, eq=False)
class StepsSampler:
    name = "steps"
    job_log: Path | None = None
    interval_s: float = 0.25  # the hang detector's floor is 1 s of no step: stay well under it
    find_outputs: bool = True  # follow the job's own output files (live/attach/job_outputs.py)
    feed: StepFeed | None = None  # --watch: every record written is handed to the watcher, parsed (step_state.py)
    hooked: dict[int, _HookedRank] = field(default_factory=dict, init=False)
    spools: dict[int, Path] = field(default_factory=dict, init=False)  # worker pid -> spool dir
    logs: list[_LogSource] = field(default_factory=list, init=False)
    records: int = field(default=0, init=False)
    log_records: int = field(default=0, init=False)
    next_scan: float = field(default=0.0, init=False)
    last_written: dict[int, int] = field(default_factory=dict, init=False)  # rank -> last step written from a log
    _copies: dict[int, BinaryIO] = field(default_factory=dict, init=False)  # rank -> its open copy in the run dir

    def start(self, ctx: LiveContext) -> None:
        for w in ctx.job.workers:
            try:
                env = psutil.Process(w.pid).environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.spools[w.pid] = spool_dir(env, w.parent)
        self._scan(ctx, history=True)
        if self.job_log is not None:
            if not self.job_log.is_file():
                ctx.note(f"steps: --job-log {self.job_log} is not a file; no step lines read from it")
            else:
                self._follow(ctx, self.job_log, "log")
        if self.find_outputs:
            self._find_outputs(ctx)
        for log in self.logs:
            self._read_log(ctx, log, backlog=True)

    def _follow(self, ctx: LiveContext, path: Path, source: str, default_rank: int = -1) -> None:
        """Read step lines from `path` on, from its last LOG_BACKLOG_BYTES."""
        parser = StepLineParser(host=ctx.host, default_rank=default_rank)
        self.logs.append(_LogSource(LineTail.at_tail(path, LOG_BACKLOG_BYTES), parser, source))

    def _find_outputs(self, ctx: LiveContext) -> None:
        """Tail the job's own output files (stdout/stderr files, logs it holds open for writing)."""
        pids = ([ctx.job.launcher_pid] if ctx.job.launcher_pid else []) + ctx.job.pids
        exclude = [ctx.run_dir] + ([self.job_log] if self.job_log is not None else [])
        found = find_job_outputs(pids, exclude=exclude)
        rank_of = {w.pid: w.rank for w in ctx.job.workers}
        if found.ours:  # `perftracker run` reads these pipes itself: its copies (live/attach/launch.py) are the output
            for copy in sorted((ctx.run_dir / "output").glob("launcher.std*.log")):
                self._follow(ctx, copy, "job-output")
        for out in found.files:
            writers = {rank_of[p] for p in out.pids if p in rank_of}
            self._follow(ctx, out.path, "job-output", writers.pop() if len(writers) == 1 else -1)
        if found.ours:
            ctx.note("steps: reading step lines from the job's output as `perftracker run` passes it through "
                     f"({ctx.run_dir / 'output'})")
        if found.files:
            shown = "; ".join(out.label for out in found.files[:8])
            more = f" and {len(found.files) - 8} more" if len(found.files) > 8 else ""
            ctx.note(f"steps: reading step lines from the job's own output: {shown}{more}")
        if found.pipes:
            ctx.note(f"steps: {len(found.pipes)} stdout/stderr stream(s) of the job are pipes or terminals "
                     f"(e.g. pid {found.pipes[0][0]} fd {found.pipes[0][1]}: {found.pipes[0][2]}); they are not "
                     "read, since reading a pipe takes the lines from whoever reads the job's output: redirect "
                     "it to a file (or `| tee FILE`, then --job-log FILE) to have step lines from it")

    def _scan(self, ctx: LiveContext, history: bool) -> None:
        """Find ranks whose hook is installed (`<spool>/ranks/rank-<r>.json` written by that worker: `hooked_by`)."""
        self.next_scan = time.monotonic() + RESCAN_S
        run = ctx.run_dir.resolve()
        for w in ctx.job.workers:
            spool = self.spools.get(w.pid)
            if spool is None or w.rank in self.hooked:
                continue
            if not hooked_by(spool, w.rank, w.pid):  # (the previous run's files in a reused spool are not)
                continue
            source = step_file(spool, w.rank)
            same = spool.resolve() == run
            tail = LineTail.at_tail(source, HISTORY_BYTES) if history or same else LineTail(source)
            self.hooked[w.rank] = _HookedRank(w.rank, tail, None if same else step_file(ctx.run_dir, w.rank))

    def sample(self, ctx: LiveContext) -> None:
        if len(self.hooked) < len(ctx.job.workers) and time.monotonic() >= self.next_scan:
            self._scan(ctx, history=True)
        for hooked in self.hooked.values():
            lines = hooked.tail.read_lines()
            if not lines:
                continue
            if hooked.target is not None:
                self._copy(hooked, lines)
            records = parse_step_lines(lines)
            self.records += len(records)
            if self.feed is not None:
                self.feed.publish(records)
            self._progress(ctx, records)
        for log in self.logs:
            self._read_log(ctx, log)

    def _copy(self, hooked: _HookedRank, lines: list[bytes]) -> None:
        """Append the hook's lines to the run directory's copy (kept open: one write and flush a look)."""
        assert hooked.target is not None
        out = self._copies.get(hooked.rank)
        if out is None:
            hooked.target.parent.mkdir(parents=True, exist_ok=True)
            out = self._copies[hooked.rank] = open(hooked.target, "ab")  # noqa: SIM115  closed in stop()
        out.write(b"".join(line + b"\n" for line in lines))
        out.flush()

    def _read_log(self, ctx: LiveContext, log: _LogSource, backlog: bool = False) -> None:
        lines = log.tail.read_lines()
        found = []
        now = time.time_ns()
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
            if backlog and line_time_ns(line) is None:
                continue
            record = log.parser.feed(line, now)
            if record is not None and self._wanted(log, record):
                if log.source != "log":
                    record.update(source=log.source, file=str(log.tail.path))
                append_jsonl(step_file(ctx.run_dir, int(record["rank"])), record)
                found.append(record)
        log.records += len(found)
        self.log_records += len(found)
        if self.feed is not None and found:
            self.feed.publish(found)
        if not self.hooked:
            self._progress(ctx, found)

    def _wanted(self, log: _LogSource, record: dict[str, Any]) -> bool:
        """A log record is written once per (rank, step) whatever file it came from (the launcher's copy of a
        worker's output holds the same lines), and one found on the job's own output only for ranks the hook
        does not already time (rank -1: only while no rank is hooked)."""
        rank, step = int(record["rank"]), int(record["step"])
        if log.source != "log" and (rank in self.hooked or (rank < 0 and self.hooked)):
            return False
        if step <= self.last_written.get(rank, -1):
            return False
        self.last_written[rank] = step
        return True

    @staticmethod
    def _progress(ctx: LiveContext, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        with ctx.lock:
            steps = ctx.progress.steps
            for rec in records:
                steps.add(int(rec["rank"]), int(rec["step"]), int(rec["start_ns"]), int(rec["end_ns"]))

    def stop(self, ctx: LiveContext) -> None:
        try:
            self.sample(ctx)
        finally:
            for out in self._copies.values():
                out.close()
            self._copies.clear()
            for tail in [*(h.tail for h in self.hooked.values()), *(log.tail for log in self.logs)]:
                tail.close()
        ranks = len(ctx.job.workers)
        if not self.hooked and not self.log_records and not any(log.source == "log" for log in self.logs):
            ctx.note(f"steps: no step times: the job has no perftracker hook, no --job-log was given and no step "
                     f"lines were found in its output files; next time add `{HOOK_LINE}` to the training script, "
                     "or pass --job-log FILE (Megatron-LM, DeepSpeed, Hugging Face Trainer, Lightning or "
                     "torchtitan step lines)")
        elif self.hooked and len(self.hooked) < ranks:
            missing = sorted({w.rank for w in ctx.job.workers} - set(self.hooked))
            ctx.note(f"steps: {len(missing)} of {ranks} rank(s) have no perftracker hook "
                     f"({', '.join(map(str, missing[:16]))}); their steps are missing")
        elif not self.hooked and not self.log_records:  # (a --job-log is read: else the first note)
            ctx.note(f"steps: no step lines recognised in {self.job_log} (Megatron-LM `elapsed time per "
                     "iteration`, DeepSpeed `step=`/`global_step=`, HF Trainer or Lightning progress bar, "
                     f"torchtitan `step: N  loss:`); for exact per-rank steps add `{HOOK_LINE}`")

    def status(self) -> str:
        parts = []
        if self.hooked:
            parts.append(f"hook on {len(self.hooked)} rank(s), {self.records} step(s)")
        if self.logs:
            parts.append(f"log: {self.log_records} step line(s) from {len(self.logs)} file(s)")
        return ", ".join(parts) or "no hook found (yet), no --job-log, no output file"

