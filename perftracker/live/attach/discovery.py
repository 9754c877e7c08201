"""Find a running job's processes: launcher, workers and their ranks, from a PID, run id or pattern.

A bare number is a PID; `pid:`, `runid:`, `cmd:` prefixes remove any doubt. Workers are processes with a rank
in their environment, not their children that inherited it. A zombie or a vanished process is an InputError;
processes of another user are reported (`Job.denied`), not skipped. Command lines are kept redacted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from perftracker.errors import InputError, UsageError
from perftracker.launcher_env import LOCAL_RANK_VARS, RANK_VARS, WORLD_VARS, first_int
from perftracker.redaction import redact_command


@dataclass(frozen=True)
class Worker:
    rank: int
    local_rank: int
    pid: int
    host: str
    cmdline: str
    run_id: str
    world_size: int
    parent: int


@dataclass
class Job:
    """The processes of one job on this host."""

    workers: list[Worker]
    launcher_pid: int | None = None
    run_id: str = ""
    denied: list[int] = field(default_factory=list)  # processes whose environment we could not read

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]


def worker_of(proc: psutil.Process, host: str) -> Worker | None:
    """The Worker view of a process on this machine (`host`), or None when it has no rank in its environment."""
    env = proc.environ()
    rank = first_int(env, RANK_VARS)
    if rank is None:
        return None
    try:
        cmd = " ".join(redact_command(proc.cmdline()))
        parent = proc.ppid()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        cmd, parent = "", -1
    local = first_int(env, LOCAL_RANK_VARS)
    world = first_int(env, WORLD_VARS)
    return Worker(rank=rank, local_rank=local if local is not None else -1, pid=proc.pid, host=host,
                  cmdline=cmd, run_id=env.get("TORCHELASTIC_RUN_ID", ""), world_size=world or -1, parent=parent)


def _workers_among(procs: Iterable[psutil.Process], denied: list[int], host: str) -> list[Worker]:
    """The rank processes among `procs`: a process whose parent is already one of them with the same rank
    (a data-loader or a subprocess that inherited RANK) is that rank's child, not a rank of its own."""
    found = []
    for proc in procs:
        try:
            worker = worker_of(proc, host)
        except psutil.AccessDenied:
            if _may_be_training(proc):
                denied.append(proc.pid)
            continue
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if worker is not None and worker.pid != os.getpid():
            found.append(worker)
    ranked = {w.pid: w for w in found}
    return sorted((w for w in found if not _inherited(w, ranked)), key=lambda w: (w.rank, w.pid))


def _inherited(worker: Worker, ranked: dict[int, Worker]) -> bool:
    """Is `worker` a child (or grandchild ...) of a process with the same rank and run id? (bounded walk)"""
    parent = ranked.get(worker.parent)
    return parent is not None and parent.rank == worker.rank and parent.run_id == worker.run_id


def _may_be_training(proc: psutil.Process) -> bool:
    """Could this unreadable process be a rank? Python (or an unreadable command line) may be; a
    readable command line of another program is not worth a warning."""
    try:
        cmd = " ".join(proc.cmdline()).lower()
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return True
    return not cmd or "python" in cmd or "torchrun" in cmd or "pt_elastic" in cmd


def parse_spec(spec: str) -> tuple[str, str]:
    """('pid'|'runid'|'cmd', value) for a job spec."""
    spec = spec.strip()
    for prefix in ("pid", "runid", "cmd"):
        if spec.startswith(prefix + ":"):
            value = spec[len(prefix) + 1:]
            if prefix == "pid" and not (value.isascii() and value.isdigit() and 0 < int(value) < 1 << 31):
                raise UsageError(f"'{spec[:80]}' names no process id (pid: takes a whole number from 1)", "attach",
                                 "give pid:<a pid from `perftracker ps`>, a run id or a command-line pattern")
            return prefix, value
    if spec.isascii() and spec.isdigit() and 0 < int(spec) < 1 << 31:
        return "pid", spec
    return "auto", spec


def find_job(spec: str, host: str) -> Job:
    """The job named by `spec` on this machine (`host`); InputError with what to do when nothing matches."""
    kind, value = parse_spec(spec)
    denied: list[int] = []
    job = _by_pid(int(value), denied, host) if kind == "pid" else Job([])
    if kind in ("runid", "auto"):
        job = _by_run_id(value, denied, host)
    if kind == "cmd" or (kind == "auto" and not job.workers):  # a bare word: a run id, else a command pattern
        job = _by_cmd(value, denied, host)
    job.denied = denied
    if not job.workers:
        hint = denied_hint(denied) if denied else "run `perftracker ps` to list the jobs and ranks this user can see"
        raise InputError(f"found no training processes for '{spec}' (no process with RANK in its environment)",
                         "attach", hint)
    return job


def denied_hint(pids: list[int]) -> str:
    """What to do about processes whose environment could not be read, for who we are."""
    shown = ", ".join(str(p) for p in sorted(pids)[:8]) + (", ..." if len(pids) > 8 else "")
    if os.geteuid() == 0:
        return (f"{len(pids)} process(es) (pid {shown}) could not be read even as root: they are protected or run "
                "in another PID namespace; run perftracker inside the job's container, or give it CAP_SYS_PTRACE")
    return (f"{len(pids)} process(es) (pid {shown}) belong to another user: run as the job's user or as root "
            "(in containers, share the PID namespace and add CAP_SYS_PTRACE)")


def job_label(job: Job) -> str:
    """How a job is named to people: its run id, else its launcher pid (torchrun's static default "none"
    is no name)."""
    if job.run_id and job.run_id != "none":
        return job.run_id
    return f"launcher pid {job.launcher_pid}" if job.launcher_pid else "(no run id)"


_RUNNING = "attach to a running rank or its launcher (`perftracker ps`)"


def _by_pid(pid: int, denied: list[int], host: str) -> Job:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise psutil.ZombieProcess(pid)
    except psutil.ZombieProcess:
        raise InputError(f"pid {pid} has exited (a zombie its parent has not reaped): nothing to attach to",
                         "attach", _RUNNING) from None
    except psutil.NoSuchProcess:
        raise InputError(f"no process with pid {pid}", "attach", "check the pid with `perftracker ps`") from None
    try:
        me = worker_of(proc, host)
    except psutil.ZombieProcess:
        raise InputError(f"pid {pid} exited as it was read (a zombie until its parent reaps it): nothing to attach "
                         "to", "attach", _RUNNING) from None
    except psutil.NoSuchProcess:
        raise InputError(f"pid {pid} exited as it was read", "attach", _RUNNING) from None
    except psutil.AccessDenied:
        raise InputError(f"not allowed to read the environment of pid {pid}", "attach",
                         "run as the job's user or as root (CAP_SYS_PTRACE in containers)") from None
    if me is not None:  # a worker: the job is everyone of its run id, else its launcher's children
        if me.run_id:
            job = _by_run_id(me.run_id, denied, host)
            if job.workers:
                return job
        return _children_of(me.parent, denied, host) if me.parent > 1 else Job([me])
    return _children_of(pid, denied, host)


def _children_of(pid: int, denied: list[int], host: str) -> Job:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return Job([])
    workers = _workers_among(children, denied, host)
    return Job(workers, launcher_pid=pid, run_id=workers[0].run_id if workers else "")


def _by_run_id(run_id: str, denied: list[int], host: str) -> Job:
    workers = [w for w in _workers_among(psutil.process_iter(), denied, host) if w.run_id == run_id]
    return Job(workers, launcher_pid=_common_launcher(workers), run_id=run_id)


def _by_cmd(pattern: str, denied: list[int], host: str) -> Job:
    matched = [proc for proc in psutil.process_iter(["cmdline"])
               if pattern in " ".join(proc.info.get("cmdline") or []) and proc.pid != os.getpid()]
    workers = _workers_among(matched, denied, host)
    if not workers:  # the pattern named a launcher: take its ranked children
        for proc in matched:
            job = _children_of(proc.pid, denied, host)
            if job.workers:
                return job
        return Job([])
    return Job(workers, launcher_pid=_common_launcher(workers), run_id=workers[0].run_id)


def _common_launcher(workers: list[Worker]) -> int | None:
    parents = {w.parent for w in workers}
    return parents.pop() if len(parents) == 1 else None


def list_jobs(host: str) -> list[Job]:
    """Every job visible on this machine (`host`), grouped by run id (else by parent process)."""
    denied: list[int] = []
    groups: dict[str, list[Worker]] = {}
    for w in _workers_among(psutil.process_iter(), denied, host):
        groups.setdefault(w.run_id or f"parent:{w.parent}", []).append(w)
    jobs = [Job(ws, launcher_pid=_common_launcher(ws), run_id=ws[0].run_id) for ws in groups.values()]
    if jobs:
        jobs[0].denied = denied
    return jobs
