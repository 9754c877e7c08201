"""The contract every live collector follows, and the shared context they run in.

A sampler is started once, asked to `sample` every `interval_s` seconds from its own thread, and
stopped once (also on Ctrl-C or when the job ends). It writes incrementally into the run directory
(appends that survive a crash), never raises into the session (errors become notes), and reports a
one-line status for the live panel. Samplers share facts through `LiveContext.progress`, and ask
for verdicts only through `LiveContext.diagnosis` (`live/diagnosis.py`; by default it judges nothing).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.diagnosis import LiveDiagnosis, NoDiagnosis
from perftracker.live.samplers.step_state import StepState


@dataclass
class Progress:
    """What samplers learned that others use: the job's step progress (`steps`, the one `StepState` of the
    session, which the steps sampler keeps) and the current suspicion."""

    steps: StepState = field(default_factory=StepState)
    suspicion: str = ""
    hang_requested: bool = False
    requested_at: float = 0.0  # epoch s the request names (a request file's mtime), 0 = now

    @property
    def last_step(self) -> dict[int, int]:
        """rank -> last step seen."""
        return self.steps.last_step

    @last_step.setter
    def last_step(self, value: dict[int, int]) -> None:
        self.steps.last_step = value

    @property
    def last_step_ns(self) -> dict[int, int]:
        """rank -> wall time (ns) its last step ended."""
        return self.steps.last_step_ns

    @last_step_ns.setter
    def last_step_ns(self, value: dict[int, int]) -> None:
        self.steps.last_step_ns = value

    @property
    def step_durations_ns(self) -> list[int]:
        """The recent step durations of all ranks (a copy)."""
        return list(self.steps.recent)

    @step_durations_ns.setter
    def step_durations_ns(self, value: list[int]) -> None:
        self.steps.set_durations(value)

    def median_step_ns(self) -> int | None:
        """The job's typical step (`StepState.median_step_ns`: one definition for every live question)."""
        return self.steps.median_step_ns()


@dataclass
class LiveContext:
    run_dir: Path
    job: Job
    host: str
    sysfs_root: Path = Path("/sys")
    notes: list[str] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started_ns: int = field(default_factory=time.time_ns)
    diagnosis: LiveDiagnosis = field(default_factory=NoDiagnosis)  # the CLI wires in the analyzers' verdicts
    _started: dict[int, int] = field(default_factory=dict, repr=False)  # pid -> start time first seen (alive())

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
                if _psutil_alive(w.pid):
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


def stat_fields(path: str) -> list[bytes] | None:
    """The fields of a /proc `stat` file after the command name (field 3, the state, first), or None."""
    try:
        with open(path, "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2:].split()


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process from /proc, None when it is not there."""
    fields = stat_fields(f"/proc/{pid}/stat")
    if fields is None:
        return None
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


def _psutil_alive(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Sampler(Protocol):
    name: str
    interval_s: float

    def start(self, ctx: LiveContext) -> None: ...

    def sample(self, ctx: LiveContext) -> None: ...

    def stop(self, ctx: LiveContext) -> None: ...

    def status(self) -> str: ...
