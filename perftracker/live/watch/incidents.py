"""An incident of `attach --watch`: open `RUN/incidents/<UTC time>-<kind>-<host>/`, capture the evidence its
kind needs off the session's loop, and have it analyzed.

`capture_incident` writes `incident.json` (atomically, at each stage), `evidence/` (a run directory: stacks,
sampled stacks, traces, step and counter tails, scheduler records, the baseline window) and the reporter's
analysis; it never raises. `baseline_capture` records the healthy window once.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perftracker.collectors.counters.sched import snapshot_record, state_record
from perftracker.collectors.steps import parse_step_line
from perftracker.containment import OUTPUT_MARK
from perftracker.live.sampler import LiveContext, append_records
from perftracker.live.samplers.profile_sampler import ProfileSampler
from perftracker.live.samplers.stacks import StackSampler, snapshot_name
from perftracker.live.samplers.traces import TraceSampler
from perftracker.rundir import atomic_write_bytes, atomic_write_text, write_manifest
from perftracker.store.alarms import Alarm

STEPS_TAIL_BYTES = 256 * 1024
COUNTERS_TAIL_BYTES = 512 * 1024
TRACE_WAIT_S = 30.0
INCIDENT_FILE = "incident.json"
STATE_EVERY_S = (0.05, 0.1)  # the ranks' states are sampled every 50-100 ms (uniform jitter) during a recording
RECORDER_POLL_S = 0.5
BASELINE_FILE = "baseline.json"  # written last by `baseline_capture`: the baseline window is complete


@dataclass(frozen=True)
class IncidentVerdict:
    """What the analysis of an incident's evidence said."""

    verdict: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    report: str = ""  # path of report.html, "" when none was written


IncidentReporter = Callable[[Path, Path], IncidentVerdict]  # (evidence folder, output folder) -> verdict


@dataclass
class CapturePlan:
    """What an incident captures (the watcher's `WatchOptions` is one)."""

    profile_seconds: float = 10.0
    profile_rate_hz: int = 20
    trace_steps: int = 8  # enough steps (trials) for the straggler test to name one of 2 ranks at 1%
    cap_bytes: int = 64 * 1024 * 1024


@dataclass
class IncidentRecord:
    """incident.json."""

    kind: str
    opened_ns: int
    trigger: str
    ranks: list[int]
    hosts: list[str]
    step: int
    current_s: float | None
    best_s: float | None
    details: list[str]
    state: str = "capturing"
    step_source: str = ""  # "stacks": the step times were burst periods of sampled stacks (`step` is a burst)
    notes: list[str] = field(default_factory=list)
    verdict: str = ""
    named_ranks: list[int] = field(default_factory=list)
    named_hosts: list[str] = field(default_factory=list)
    report: str = ""
    watched_from: str = ""  # the host whose attach opened it (several nodes' watchers may share one run directory)

    @classmethod
    def of(cls, alarm: Alarm, opened_ns: int, watched_from: str = "") -> IncidentRecord:
        return cls(alarm.kind, opened_ns, alarm.text, list(alarm.ranks), list(alarm.hosts), alarm.step,
                   alarm.current_s, alarm.best_s, list(alarm.details), watched_from=watched_from)

    def write(self, folder: Path) -> None:
        atomic_write_text(folder / INCIDENT_FILE, json.dumps(asdict(self), indent=1) + "\n")


def _file_safe(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", host).strip("._") or "host"


def incident_folder(run_dir: Path, alarm: Alarm, opened_s: float, host: str) -> Path:
    """`incidents/<UTC time>-<kind>-<host>`: the watching host is in the name, since the watchers of several nodes
    may write into one shared run directory and open incidents in the same millisecond."""
    return run_dir / "incidents" / snapshot_name(opened_s, f"{alarm.kind}-{_file_safe(host)}")


def baseline_folder(run_dir: Path, host: str) -> Path:
    """`incidents/baseline-<host>`: each node's watcher records its own ranks' healthy window."""
    return run_dir / "incidents" / f"baseline-{_file_safe(host)}"


def folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            total += path.stat().st_size if path.is_file() else 0
    return total


def copy_tail(src: Path, dest: Path, keep: int) -> None:
    """The last `keep` bytes of `src` (from a line start) into `dest`."""
    try:
        with open(src, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - keep))
            data = handle.read(keep)
    except OSError:
        return
    if size > keep:
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    atomic_write_bytes(dest, data)


def copy_window(ctx: LiveContext, evidence: Path) -> None:
    """Step files, counters and env snapshots of the run, their recent part, into `evidence`."""
    for sub, keep in (("steps", STEPS_TAIL_BYTES), ("counters", COUNTERS_TAIL_BYTES)):
        for src in sorted((ctx.run_dir / sub).glob("*.jsonl")):
            copy_tail(src, evidence / sub / src.name, keep)
    env = ctx.run_dir / "env"
    if env.is_dir():
        shutil.copytree(env, evidence / "env", dirs_exist_ok=True)


def record_profiles(ctx: LiveContext, folder: Path, seconds: float, rate_hz: int, stop: threading.Event) -> None:
    """Every rank's stacks side by side for `seconds` (stops early on `stop`), with the ranks' scheduler records at
    its start and end and their main threads' states every STATE_EVERY_S through it (`sched/` beside `folder`)."""
    sched = folder.parent / "sched"
    if snapshot := per_rank(ctx, snapshot_record):
        append_records(sched / f"{ctx.host}.sched.jsonl", snapshot)
    recorder = ProfileSampler(seconds=seconds, rate_hz=rate_hz, delay_s=0.0, out_dir=folder, judge=False)
    recorder.start(ctx)
    states: list[dict[str, Any]] = []
    polled = 0.0
    while not recorder.done and not stop.is_set():
        now = time.monotonic()
        if now - polled >= RECORDER_POLL_S:
            recorder.sample(ctx)
            polled = now
        states.extend(per_rank(ctx, state_record))
        stop.wait(random.uniform(*STATE_EVERY_S))  # noqa: S311  jitter, not security
    recorder.stop(ctx)
    if snapshot := per_rank(ctx, snapshot_record):
        append_records(sched / f"{ctx.host}.sched.jsonl", snapshot)
    if states:  # the window's sampled states, at once
        append_records(sched / f"{ctx.host}.states.jsonl", states)


def per_rank(ctx: LiveContext, read: Callable[[str, int, int, int], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """One record per rank now (its scheduler accounting, `collectors/counters/sched.py`, or its main thread's
    state, the same module: one /proc read per rank), the ranks that gave none left out."""
    now = time.time_ns()
    return [rec for w in ctx.job.workers if (rec := read(ctx.host, w.rank, w.pid, now)) is not None]


def step_started_ns(steps: Path, step: int) -> int | None:
    """When `step` began (the earliest start of any rank's record of it in these step files), or None."""
    if step < 0:
        return None
    found: list[int] = []
    for path in sorted(steps.glob("*.jsonl")):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        found.extend(int(rec["start_ns"]) for rec in map(parse_step_line, lines) if rec is not None and rec["step"] == step)
    return min(found) if found else None


def copy_baseline(baseline: Path, evidence: Path, notes: list[str], began_ns: int | None = None) -> None:
    """The healthy window's stacks (`baseline_capture`'s profiles) into `evidence/baseline/profiles/`, where the
    loader keeps them apart from the incident's own (the `baseline_shift` analyzer compares the two); not when
    the change began (`began_ns`) earlier than the last tenth of the baseline window: that window was not healthy
    (a change step estimated to begin a few steps before the capture ended leaves the window 90% healthy)."""
    try:
        info = json.loads((baseline / BASELINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        notes.append("no baseline window yet (it is recorded once the rules arm): the stacks are compared "
                     "across ranks only")
        return
    ended = info.get("captured_ns") if isinstance(info, dict) else None
    window_s = info.get("profile_seconds") if isinstance(info, dict) else None
    tolerance_ns = int(max(window_s, 0) * 1e9 / 10) if isinstance(window_s, (int, float)) else 0  # a tenth
    if began_ns is not None and isinstance(ended, int) and began_ns < ended - tolerance_ns:
        notes.append("the baseline window was still recording when the change began: not compared with it")
        return
    for src in sorted((baseline / "sched").glob("*.jsonl")):  # the ranks' CPU wait and states in the healthy window
        (evidence / "baseline" / "sched").mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, evidence / "baseline" / "sched" / src.name)
    profiles = sorted((baseline / "profiles").glob("rank-*.*"))
    if not profiles:
        notes.append("the baseline window has no stacks: the stacks are compared across ranks only")
        return
    folder = evidence / "baseline" / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    for src in profiles:
        shutil.copy2(src, folder / src.name)


def _request_traces(ctx: LiveContext, folder: Path, steps: int, notes: list[str]) -> TraceSampler | None:
    tracer = TraceSampler(steps=steps, out_dir=folder)
    before = len(ctx.notes)
    tracer.start(ctx)
    new = ctx.notes[before:]
    if not tracer.pending:
        notes.append("no trace: no rank is hooked (perftracker.hooks.install()) or started with "
                     "KINETO_USE_DAEMON=1")
        return None
    notes.extend(n for n in new if n.startswith("traces:"))
    return tracer


def _trim(evidence: Path, cap: int, notes: list[str]) -> None:
    for sub in ("traces", "profiles"):
        if folder_bytes(evidence) <= cap:
            return
        if (evidence / sub).is_dir():
            shutil.rmtree(evidence / sub, ignore_errors=True)
            notes.append(f"{sub}/ removed: the incident was over its cap of {cap // (1024 * 1024)} MB")


def capture_incident(ctx: LiveContext, alarm: Alarm, folder: Path, plan: CapturePlan, stacks: StackSampler | None,
                     reporter: IncidentReporter | None, stop: threading.Event) -> IncidentRecord:
    """See the module docstring. Never raises: a failure is a note in incident.json."""
    record = IncidentRecord.of(alarm, time.time_ns(), ctx.host)
    evidence = folder / "evidence"
    try:
        evidence.mkdir(parents=True, exist_ok=True)
        (folder / OUTPUT_MARK).touch()  # perftracker's own folder: its analysis is written beside the evidence
        record.step_source = alarm.source
        record.write(folder)
        if alarm.kind == "hang" and stacks is not None:
            look = stacks.dump_into(ctx, "native", evidence / "stacks" / snapshot_name(time.time(), "hang"))
            record.notes.append(f"native stacks of {len(look)} rank(s)")
        tracer = (_request_traces(ctx, evidence / "traces", plan.trace_steps, record.notes)
                  if alarm.kind != "hang" and plan.trace_steps > 0 else None)
        if plan.profile_seconds > 0:
            record_profiles(ctx, evidence / "profiles", plan.profile_seconds, plan.profile_rate_hz, stop)
        deadline = time.monotonic() + TRACE_WAIT_S
        while tracer is not None and not tracer.finished() and time.monotonic() < deadline and not stop.is_set():
            tracer.sample(ctx)
            stop.wait(0.5)
        if tracer is not None:
            tracer.stop(ctx)
        copy_window(ctx, evidence)
        copy_baseline(baseline_folder(ctx.run_dir, ctx.host), evidence, record.notes,
                      began_ns=step_started_ns(evidence / "steps", alarm.step))
        write_manifest(evidence, job=ctx.job.run_id or f"pid {ctx.job.launcher_pid}",
                       created_by="perftracker attach --watch", incident=alarm.kind)
        _trim(evidence, plan.cap_bytes, record.notes)
    except Exception as exc:  # noqa: BLE001  the session and the job go on whatever happens here
        record.notes.append(f"capture stopped early ({type(exc).__name__}: {exc})")
    cut_short = stop.is_set()  # the session ended before the evidence was complete (not merely during the analysis)
    if cut_short:
        record.notes.append("the session ended during the capture: what was captured until then is kept")
    record.state = "analyzing"
    _safe_write(record, folder)
    if reporter is not None:
        try:
            verdict = reporter(evidence, folder)
            record.verdict, record.report = verdict.verdict, verdict.report
            record.named_ranks, record.named_hosts = list(verdict.ranks), list(verdict.hosts)
        except Exception as exc:  # noqa: BLE001
            record.notes.append(f"not analyzed ({type(exc).__name__}: {exc}); run `perftracker analyze {evidence}`")
    record.state = "interrupted" if cut_short else "done"
    _safe_write(record, folder)
    return record


def _safe_write(record: IncidentRecord, folder: Path) -> None:
    with contextlib.suppress(OSError):
        record.write(folder)


def baseline_capture(ctx: LiveContext, folder: Path, seconds: float, rate_hz: int, stop: threading.Event) -> None:
    """The healthy window, once, shortly after arming: every rank's stacks for `seconds` and the steps so far."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if seconds > 0:
            record_profiles(ctx, folder / "profiles", seconds, rate_hz, stop)
        copy_window(ctx, folder)
        info: dict[str, Any] = {"captured_ns": time.time_ns(), "profile_seconds": seconds}
        atomic_write_text(folder / BASELINE_FILE, json.dumps(info) + "\n")
    except Exception as exc:  # noqa: BLE001
        ctx.note(f"watch: the baseline window could not be captured ({type(exc).__name__}: {exc})")
