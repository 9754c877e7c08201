"""The contract every live collector follows, and the shared context they run in.

A sampler is started once, asked to `sample` every `interval_s` from its own thread, and stopped once; it
appends into the run directory, never raises into the session (errors become notes) and gives a one-line
status. Samplers share facts through `LiveContext.progress` and ask for verdicts only through
`LiveContext.diagnosis`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from perftracker.collectors.counters.sched import stat_fields
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.diagnosis import LiveDiagnosis, NoDiagnosis
from perftracker.live.samplers.step_state import StepState


@dataclass
class Progress:
    """What samplers learned that others use: the session's one `StepState` (the steps sampler keeps it), the
    current suspicion, and a pending stack request."""

    steps: StepState = field(default_factory=StepState)
    suspicion: str = ""
    hang_requested: bool = False
    requested_at: float = 0.0  # epoch s the request names (a request file's mtime), 0 = now


class LiveContext:
    """What every sampler of one session shares: where it writes, the job, this host, notes, the job's progress
    and the diagnosis seam (the CLI wires in the analyzers' verdicts)."""

    __slots__ = ("run_dir", "job", "host", "sysfs_root", "notes", "progress", "lock", "started_ns", "diagnosis",
                 "_started")

    def __init__(self, run_dir: Path, job: Job, host: str, sysfs_root: Path = Path("/sys"),
                 diagnosis: LiveDiagnosis | None = None) -> None:
        self.run_dir, self.job, self.host, self.sysfs_root = run_dir, job, host, sysfs_root
        self.diagnosis: LiveDiagnosis = diagnosis or NoDiagnosis()
        self.notes: list[str] = []
        self.progress = Progress()
        self.lock = threading.Lock()
        self.started_ns = time.time_ns()
        self._started: dict[int, int] = {}  # pid -> start time first seen (alive())

    def note(self, text: str) -> None:
        with self.lock:
            if text not in self.notes:
                self.notes.append(text)

    def alive(self) -> list[Worker]:
        """Workers still running (a worker that exited is dropped; the others go on). One read of
        `/proc/<pid>/stat` per worker (its state, and its start time against the one first seen: a reused pid
        is not the worker), psutil where /proc is not there."""
        out = []
        for w in self.job.workers:
            if not _PROC_STAT:  # no /proc (macOS)
                with contextlib.suppress(psutil.NoSuchProcess):
                    process = psutil.Process(w.pid)
                    if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                        out.append(w)
                continue
            seen = _proc_state(w.pid)
            if seen is None:
                continue
            state, started = seen
            if self._started.setdefault(w.pid, started) == started and state not in ("Z", "X", "x"):
                out.append(w)
        return out


_PROC_STAT = Path("/proc/self/stat").exists()


def append_records(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append records as JSON lines in one write (the counters' and incidents' files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write("".join(json.dumps(rec) + "\n" for rec in records))


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process from /proc, None when it is not there."""
    fields = stat_fields(f"/proc/{pid}/stat")
    if fields is None:
        return None
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


class Sampler(Protocol):
    name: str
    interval_s: float

    def start(self, ctx: LiveContext) -> None: ...

    def sample(self, ctx: LiveContext) -> None: ...

    def stop(self, ctx: LiveContext) -> None: ...

    def status(self) -> str: ...
