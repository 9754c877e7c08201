"""Slow one worker of a running job down from *outside* the job, for ``run_job(..., disturb=...)``.

Promise: each class here is a callable ``disturb(pids, stop)`` (``pids``: rank -> worker pid, ``stop``:
a ``threading.Event`` set when the job ends) that slows the worker of ``rank`` while the job runs and
undoes what it did before returning, even when it fails or the job ends under it:

* ``DutyCycle(rank, stopped=0.4, period_s=0.05)``: SIGSTOP the worker for ``stopped`` of every
  ``period_s``, SIGCONT it for the rest; it is always left continued (SIGCONT in ``finally``).
* ``CoreContention(rank, competitors=2)``: pin every thread of the worker, and ``competitors``
  busy-looping processes, to core ``victim_core``; pin the other ranks to the remaining cores (the
  competitors are killed on exit). Needs at least 2 cores.
* ``CpuQuota(rank, share=0.25)``: put every thread of the worker in a cgroup-v1 ``cpu`` group limited to
  ``share`` of one core (CFS quota); the threads are moved back and the group removed on exit. Needs
  a writable ``/sys/fs/cgroup/cpu`` (root); ``CpuQuota.available()`` says whether it is.

Each has ``describe()`` (what the run directory's manifest records). Tests import this module with
``sys.path.insert(0, "<repo>/scripts")``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")


def _threads(pid: int) -> list[int]:
    """Thread ids of process `pid` (empty once it is gone)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _pin(pid: int, cores: set[int]) -> None:
    """Set the CPU affinity of every thread of `pid` (sched_setaffinity on a pid sets one thread only)."""
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, cores)
        except (ProcessLookupError, PermissionError):
            pass  # thread ended


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


@dataclass
class DutyCycle:
    """SIGSTOP/SIGCONT duty cycle on one worker: stopped for `stopped` of every `period_s`."""

    rank: int
    stopped: float = 0.4
    period_s: float = 0.05
    how: str = field(default="sigstop-duty-cycle", init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.stopped < 1.0 or self.period_s <= 0:
            raise ValueError("stopped must be in (0, 1) and period_s > 0")

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        pid = pids[self.rank]
        off_s, on_s = self.stopped * self.period_s, (1.0 - self.stopped) * self.period_s
        try:
            while not stop.is_set():
                if not _signal(pid, signal.SIGSTOP):
                    return
                # stop.wait, not sleep: the job may end (or time out) while the worker is stopped
                stop.wait(off_s)
                if not _signal(pid, signal.SIGCONT):
                    return
                stop.wait(on_s)
        finally:
            _signal(pid, signal.SIGCONT)


@dataclass
class CoreContention:
    """The worker shares core `victim_core` with `competitors` busy loops; the other ranks are kept
    off that core."""

    rank: int
    competitors: int = 2
    victim_core: int = -1  # -1: the last allowed core
    how: str = field(default="core-contention", init=False)

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            raise RuntimeError("CoreContention needs at least 2 cores")
        victim_core = allowed[self.victim_core] if self.victim_core < 0 else self.victim_core
        others = set(allowed) - {victim_core}
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(self.competitors):
                proc = subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"],
                    # a session (so an autogroup) each: with sched_autogroup the scheduler shares a core
                    # between sessions first, and the workers each run in a session of their own
                    start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                procs.append(proc)
                os.sched_setaffinity(proc.pid, {victim_core})
            while not stop.is_set():
                # again and again: threads the workers start later (gloo, profiler) get pinned too
                for rank, pid in pids.items():
                    _pin(pid, {victim_core} if rank == self.rank else others)
                stop.wait(0.2)
        finally:
            for proc in procs:
                proc.kill()
            for proc in procs:
                proc.wait()
            for pid in pids.values():
                _pin(pid, set(allowed))


@dataclass
class CpuQuota:
    """The worker's threads in a cgroup-v1 cpu group with a CFS quota of `share` of one core."""

    rank: int
    share: float = 0.25
    period_us: int = 20_000
    how: str = field(default="cgroup-cpu-quota", init=False)

    @staticmethod
    def available() -> bool:
        return (CGROUP_CPU / "cpu.cfs_quota_us").is_file() and os.access(CGROUP_CPU, os.W_OK)

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        pid = pids[self.rank]
        group = CGROUP_CPU / f"perftracker-disturb-{os.getpid()}-{pid}"
        parent_tasks = CGROUP_CPU / "tasks"
        group.mkdir()
        try:
            (group / "cpu.cfs_period_us").write_text(str(self.period_us))
            (group / "cpu.cfs_quota_us").write_text(str(max(1000, int(self.share * self.period_us))))
            while not stop.is_set():
                for tid in _threads(pid):  # threads started later are in it already (inherited)
                    try:
                        (group / "tasks").write_text(str(tid))
                    except (ProcessLookupError, OSError):
                        pass
                stop.wait(0.2)
        finally:
            for tid in _threads(pid):
                try:
                    parent_tasks.write_text(str(tid))
                except OSError:
                    pass
            for _ in range(50):
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


def busy_ranks(pids: dict[int, int]) -> dict[int, float]:
    """CPU seconds (user + system) each worker has used so far; a debugging aid."""
    used: dict[int, float] = {}
    for rank, pid in pids.items():
        try:
            times = psutil.Process(pid).cpu_times()
            used[rank] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return used
