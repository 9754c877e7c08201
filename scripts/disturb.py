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

Clean layouts and background load, which slow no single rank (for accuracy runs' clean cases):

* ``Pinning({rank: core_indexes})``: keep each listed rank's threads on those cores (indexes into this
  process's allowed cores, sorted), re-pinning threads started later; unlisted ranks are left alone.
  Affinity is restored on exit.
* ``BackgroundLoad(hogs=1, cores=(), busy=1.0, period_s=0.1)``: ``hogs`` busy-loop processes tied to
  no rank, each busy for ``busy`` of every ``period_s`` (1.0: always), pinned to ``cores`` (indexes)
  if given; killed on exit.
* ``Together(part, ...)``: run several of these (and any ``disturb(pids, stop)``) side by side, each
  in a thread of its own; the first error any raises is raised once all have returned.

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
from collections.abc import Callable, Mapping, Sequence
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
    """SIGSTOP/SIGCONT duty cycle on one worker: stopped for `stopped` of every `period_s`.

    The stopped share holds under load: this thread's wake-ups come late on a busy machine (every late
    wake-up while the worker runs lets it run longer: with 10 ms of lateness an 80% cycle of 20 ms would
    stop it only 65% of the time), so each stop lasts until the worker's stopped time since the start is
    `stopped` of the time measured so far. `achieved_stopped` (in `describe()`) is the share it reached."""

    rank: int
    stopped: float = 0.4
    period_s: float = 0.05
    how: str = field(default="sigstop-duty-cycle", init=False)
    achieved_stopped: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.stopped < 1.0 or self.period_s <= 0:
            raise ValueError("stopped must be in (0, 1) and period_s > 0")

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        pid = pids[self.rank]
        on_s = (1.0 - self.stopped) * self.period_s
        stopped_s = running_s = 0.0
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                if not _signal(pid, signal.SIGSTOP):
                    return
                # stopped until the stopped share since the start is `stopped` again (it pays back a late
                # wake-up of this thread while the worker ran); stop.wait, not sleep: the job may end (or time
                # out) while the worker is stopped
                stop.wait(max(0.0, self.stopped * running_s / (1.0 - self.stopped) - stopped_s))
                t1 = time.monotonic()
                stopped_s += t1 - t0
                if not _signal(pid, signal.SIGCONT):
                    return
                stop.wait(on_s)
                running_s += time.monotonic() - t1
        finally:
            _signal(pid, signal.SIGCONT)
            if stopped_s + running_s > 0:
                self.achieved_stopped = round(stopped_s / (stopped_s + running_s), 3)


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


def _allowed_cores(indexes: Sequence[int]) -> set[int]:
    """The cores at `indexes` of this process's allowed cores (sorted); an index out of range is an error."""
    allowed = sorted(os.sched_getaffinity(0))
    bad = [i for i in indexes if not -len(allowed) <= i < len(allowed)]
    if bad:
        raise ValueError(f"core indexes {bad} out of range: this process may use {len(allowed)} cores {allowed}")
    return {allowed[i] for i in indexes}


@dataclass
class Pinning:
    """Each listed rank kept on its cores (indexes into the allowed cores) for the whole run."""

    cores_by_rank: Mapping[int, Sequence[int]]
    how: str = field(default="pinning", init=False)

    def describe(self) -> dict[str, Any]:
        return {"how": self.how, "cores_by_rank": {str(r): list(c) for r, c in sorted(self.cores_by_rank.items())}}

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        cores = {rank: _allowed_cores(indexes) for rank, indexes in self.cores_by_rank.items()}
        missing = sorted(set(cores) - set(pids))
        if missing:
            raise ValueError(f"Pinning: ranks {missing} are not workers of this job (ranks {sorted(pids)})")
        try:
            while not stop.is_set():
                for rank, rank_cores in cores.items():  # again and again: threads started later too
                    _pin(pids[rank], rank_cores)
                stop.wait(0.2)
        finally:
            everything = set(os.sched_getaffinity(0))
            for rank in cores:
                _pin(pids[rank], everything)


_HOG = """
import sys, time
busy, period = float(sys.argv[1]), float(sys.argv[2])
while True:
    if busy >= 1.0:
        continue
    end = time.monotonic() + busy * period
    while time.monotonic() < end:
        pass
    time.sleep((1.0 - busy) * period)
"""


@dataclass
class BackgroundLoad:
    """`hogs` busy loops tied to no rank (busy `busy` of every `period_s`), on `cores` if given."""

    hogs: int = 1
    cores: Sequence[int] = ()
    busy: float = 1.0
    period_s: float = 0.1
    how: str = field(default="background-load", init=False)

    def __post_init__(self) -> None:
        if self.hogs < 1 or not 0.0 < self.busy <= 1.0 or self.period_s <= 0:
            raise ValueError("hogs must be >= 1, busy in (0, 1] and period_s > 0")

    def describe(self) -> dict[str, Any]:
        return {"how": self.how, "hogs": self.hogs, "cores": list(self.cores), "busy": self.busy,
                "period_s": self.period_s}

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        cores = _allowed_cores(self.cores) if self.cores else None
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(self.hogs):
                proc = subprocess.Popen(
                    [sys.executable, "-c", _HOG, str(self.busy), str(self.period_s)],
                    start_new_session=True,  # an autogroup of its own, like the workers (see CoreContention)
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                procs.append(proc)
                if cores is not None:
                    os.sched_setaffinity(proc.pid, cores)
            stop.wait()
        finally:
            for proc in procs:
                proc.kill()
            for proc in procs:
                proc.wait()


Disturbance = Callable[[dict[int, int], threading.Event], None]


class Together:
    """Several disturbances at once, each in its own thread, sharing the job's `stop` event."""

    def __init__(self, *parts: Disturbance) -> None:
        self.parts = parts

    def describe(self) -> list[Any]:
        described: list[Any] = []
        for part in self.parts:
            describe = getattr(part, "describe", None)
            described.append(describe() if callable(describe) else repr(part))
        return described

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        errors: list[BaseException] = []

        def run(part: Disturbance) -> None:
            try:
                part(pids, stop)
            except BaseException as exc:  # noqa: BLE001 - raised below, after the others returned
                errors.append(exc)
                stop.set()  # the job fails anyway: let the other parts undo what they did

        threads = [threading.Thread(target=run, args=(part,), daemon=True) for part in self.parts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]


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
