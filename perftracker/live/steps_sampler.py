"""Step times of an attached job, from the perftracker hook's spool or from the job's log.

Promise: `StepsSampler` (name ``steps``) copies, four times a second, every new step record into
the run directory's ``steps/rank-<r>.jsonl`` and keeps ``ctx.progress`` (last step and its wall time
per rank, step durations) current for the live panel and the hang detector. Sources:

* the hook (``perftracker.hooks.install()`` in the job): its spool directory is computed from each
  worker's environment with the hook's own rule (``perftracker.hooks.spool_dir``); a rank counts as
  hooked when ``<spool>/ranks/rank-<r>.json`` names that worker's pid. Ranks that install the hook
  after attach started are picked up (rescan every 5 s). Records already in the spool when attach
  starts (the job's history, at most the last 16 MB per rank) are copied too.
* ``--job-log FILE``: step lines of Megatron-LM, DeepSpeed and the Hugging Face Trainer
  (`perftracker.live.step_lines`), written with the launcher prefix's rank, else rank -1
  (``steps/rank--1.jsonl``). Lines already in the file when attach starts (its last 1 MB) are used
  only when they carry a timestamp. Log records feed ``ctx.progress`` only when no rank is hooked.

Neither source: one note naming the hook line and ``--job-log``. Never raises into the session.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from perftracker.collectors.steps import parse_step_line
from perftracker.hooks import spool_dir
from perftracker.live.sampler import LiveContext
from perftracker.live.step_lines import StepLineParser, line_time_ns
from perftracker.rundir import append_jsonl, step_file

HISTORY_BYTES = 16 * 1024 * 1024
LOG_BACKLOG_BYTES = 1024 * 1024
MAX_READ = 8 * 1024 * 1024
RESCAN_S = 5.0
HOOK_LINE = "import perftracker.hooks; perftracker.hooks.install()"


@dataclass
class LineTail:
    """Complete lines appended to `path` since the last call (a partial last line waits)."""

    path: Path
    offset: int = 0
    partial: bytes = b""

    @classmethod
    def at_tail(cls, path: Path, keep: int) -> LineTail:
        """A tail that starts `keep` bytes before the current end, at a line start."""
        try:
            size = path.stat().st_size
        except OSError:
            return cls(path)
        tail = cls(path, max(0, size - keep))
        if tail.offset > 0:
            tail.read_lines()  # drop the cut-off first line
        return tail

    def read_lines(self) -> list[bytes]:
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self.offset:  # truncated or replaced: start over
            self.offset, self.partial = 0, b""
        if size == self.offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(min(size - self.offset, MAX_READ))
        self.offset += len(data)
        data = self.partial + data
        parts = data.replace(b"\r", b"\n").split(b"\n")
        self.partial = parts.pop()
        return [p for p in parts if p.strip()]


@dataclass
class _HookedRank:
    rank: int
    tail: LineTail
    target: Path | None  # None: the hook writes into the run directory itself


@dataclass
class StepsSampler:
    job_log: Path | None = None
    name: str = "steps"
    interval_s: float = 0.25  # the hang detector's floor is 1 s of no step: stay well under it
    hooked: dict[int, _HookedRank] = field(default_factory=dict)
    spools: dict[int, Path] = field(default_factory=dict)  # worker pid -> spool dir
    log_tail: LineTail | None = None
    parser: StepLineParser = field(default_factory=StepLineParser)
    records: int = 0
    log_records: int = 0
    next_scan: float = 0.0

    def start(self, ctx: LiveContext) -> None:
        self.parser.host = ctx.host
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
                self.log_tail = LineTail.at_tail(self.job_log, LOG_BACKLOG_BYTES)
                self._read_log(ctx, backlog=True)

    def _scan(self, ctx: LiveContext, history: bool) -> None:
        """Find ranks whose hook is installed (by the pid in `<spool>/ranks/rank-<r>.json`)."""
        self.next_scan = time.monotonic() + RESCAN_S
        run = ctx.run_dir.resolve()
        for w in ctx.job.workers:
            spool = self.spools.get(w.pid)
            if spool is None or w.rank in self.hooked:
                continue
            try:
                info = json.loads((spool / "ranks" / f"rank-{w.rank}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(info, dict) or info.get("pid") != w.pid:
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
                hooked.target.parent.mkdir(parents=True, exist_ok=True)
                with open(hooked.target, "ab") as out:
                    out.write(b"".join(line + b"\n" for line in lines))
                    out.flush()
            records = [r for r in (parse_step_line(line) for line in lines) if r is not None]
            self.records += len(records)
            self._progress(ctx, records)
        if self.log_tail is not None:
            self._read_log(ctx)

    def _read_log(self, ctx: LiveContext, backlog: bool = False) -> None:
        assert self.log_tail is not None
        lines = self.log_tail.read_lines()
        found = []
        now = time.time_ns()
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
            if backlog and line_time_ns(line) is None:
                continue
            record = self.parser.feed(line, now)
            if record is not None:
                append_jsonl(step_file(ctx.run_dir, int(record["rank"])), record)
                found.append(record)
        self.log_records += len(found)
        if not self.hooked:
            self._progress(ctx, found)

    @staticmethod
    def _progress(ctx: LiveContext, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        with ctx.lock:
            prog = ctx.progress
            for rec in records:
                rank, step = int(rec["rank"]), int(rec["step"])
                if step >= prog.last_step.get(rank, -1):
                    prog.last_step[rank] = step
                    prog.last_step_ns[rank] = int(rec["end_ns"])
                prog.step_durations_ns.append(int(rec["end_ns"]) - int(rec["start_ns"]))
            if len(prog.step_durations_ns) > 2000:
                del prog.step_durations_ns[:-1000]

    def stop(self, ctx: LiveContext) -> None:
        self.sample(ctx)
        ranks = len(ctx.job.workers)
        if not self.hooked and self.log_tail is None:
            ctx.note(f"steps: no step times: the job has no perftracker hook and no --job-log was given; next "
                     f"time add `{HOOK_LINE}` to the training script, or pass --job-log FILE (Megatron-LM, "
                     "DeepSpeed or Hugging Face Trainer step lines)")
        elif self.hooked and len(self.hooked) < ranks:
            missing = sorted({w.rank for w in ctx.job.workers} - set(self.hooked))
            ctx.note(f"steps: {len(missing)} of {ranks} rank(s) have no perftracker hook "
                     f"({', '.join(map(str, missing[:16]))}); their steps are missing")
        elif self.log_tail is not None and not self.hooked and self.log_records == 0:
            ctx.note(f"steps: no step lines recognised in {self.job_log} (Megatron-LM `elapsed time per "
                     "iteration`, DeepSpeed `step=`/`global_step=`, HF Trainer progress bar); "
                     f"for exact per-rank steps add `{HOOK_LINE}`")

    def status(self) -> str:
        parts = []
        if self.hooked:
            parts.append(f"hook on {len(self.hooked)} rank(s), {self.records} step(s)")
        if self.log_tail is not None:
            parts.append(f"log: {self.log_records} step line(s)")
        return ", ".join(parts) or "no hook found (yet), no --job-log"

