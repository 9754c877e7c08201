"""Launch the real sample DDP job (``scripts/sample_job.py``) under torchrun and return its run directory.

Promise: ``run_job(run_dir, nproc, steps, profile_steps, slow_rank, slow_factor, timeout)`` runs
``python -m torch.distributed.run --nproc_per_node <nproc> --master_port <free port> sample_job.py``
on this machine (CPU, gloo), waits at most ``timeout`` seconds,
writes ``manifest.json`` and returns ``run_dir`` holding, for every rank, a trace, a step file and an
env file. On timeout torchrun and every worker are stopped. Any failure raises ``JobFailed`` carrying the command and the tail of torchrun's output;
a port clash at start-up is retried once with another port.

``disturb`` (optional) acts on the workers from outside while the job runs: once every rank's worker
process is up, it is called in a thread of this process as ``disturb(pids, stop)`` with ``pids``
mapping rank -> worker pid and ``stop`` a ``threading.Event`` that is set when the job ends (or times
out); it must return soon after ``stop`` is set and leave the workers runnable (see
``scripts/disturb.py``). An exception it raises fails the run with ``JobFailed``.

Tests import it with ``sys.path.insert(0, "<repo>/scripts")``; it needs torch only in the child
processes, so importing this module is cheap.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from perftracker.rundir import step_file, trace_file, write_manifest

JOB_SCRIPT = REPO / "scripts" / "sample_job.py"
COLLECTORS = ["kineto", "steps", "env"]
_PORT_CLASH = ("address already in use", "eaddrinuse")


class JobFailed(RuntimeError):
    """The job did not finish, or finished without the files it promises."""


Disturb = Callable[[dict[int, int], threading.Event], None]
"""``disturb(pids, stop)``: act on the running workers (rank -> pid) until ``stop`` is set."""


@dataclass
class JobResult:
    """What one launch did: the command, its exit status and output, and how long it took."""

    command: list[str]
    returncode: int
    output: str
    wall_s: float
    env: dict[str, str] = field(default_factory=dict)
    worker_pids: dict[int, int] = field(default_factory=dict)


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def duty_cycle(pid: int, stopped_s: float, period_s: float, until: threading.Event) -> threading.Thread:
    """SIGSTOP `pid` for `stopped_s` of every `period_s` until `until` is set (then SIGCONT), in a daemon thread."""

    def run() -> None:
        try:
            while not until.is_set():
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stopped_s)
                os.kill(pid, signal.SIGCONT)
                until.wait(period_s - stopped_s)
        except ProcessLookupError:
            return
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def job_command(
    run_dir: Path,
    nproc: int,
    port: int,
    job_args: Sequence[str],
    python: str = sys.executable,
    nnodes: int = 1,
    node_rank: int = 0,
) -> list[str]:
    """The torchrun command line that runs the sample job into `run_dir`; with `nnodes` > 1, the
    launcher of node `node_rank` (every node's launcher on this machine, sharing `port`)."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--nnodes",
        str(nnodes),
        *(["--node_rank", str(node_rank)] if nnodes > 1 else []),
        "--max_restarts",
        "0",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        str(JOB_SCRIPT),
        "--run-dir",
        str(run_dir),
        *job_args,
    ]


def _launch(
    command: list[str], env: Mapping[str, str], timeout: float, disturb: Disturb | None = None, nproc: int = 0
) -> JobResult:
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so a timeout can kill torchrun *and* its workers
    )
    watcher = _Watcher(proc.pid, nproc, disturb) if disturb is not None else None
    if watcher is not None:
        watcher.start()
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if watcher is not None:
            watcher.finish()  # let the disturbance end (SIGCONT, ...) before stopping the tree
        _stop_tree(proc)
        output, _ = proc.communicate()
        raise JobFailed(
            f"job did not finish within {timeout:.0f} s: {shlex.join(command)}\n{_tail(output)}"
        ) from None
    finally:
        if watcher is not None:
            watcher.finish()
    result = JobResult(command, proc.returncode, output, time.monotonic() - start, dict(env))
    if watcher is not None:
        result.worker_pids = dict(watcher.pids)
        if watcher.error is not None and proc.returncode == 0:
            raise JobFailed(f"disturbance failed: {watcher.error!r}: {shlex.join(command)}") from watcher.error
        if not watcher.started and proc.returncode == 0:
            raise JobFailed(f"disturbance never started (workers not found while the job ran): {shlex.join(command)}")
    return result


def worker_pids(root_pid: int) -> dict[int, int]:
    """rank -> pid of the job's workers: descendants of `root_pid` (torchrun) running the sample job
    whose environment has RANK."""
    found: dict[int, int] = {}
    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for child in children:
        try:
            if str(JOB_SCRIPT) not in child.cmdline():
                continue
            rank = child.environ().get("RANK")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if rank is not None and rank.isdigit():
            found[int(rank)] = child.pid
    return found


class _Watcher(threading.Thread):
    """Waits until all `nproc` workers of the torchrun at `root_pid` are up, then runs `disturb`."""

    def __init__(self, root_pid: int, nproc: int, disturb: Disturb, poll_s: float = 0.05) -> None:
        super().__init__(name="sample-job-disturb", daemon=True)
        self.root_pid, self.nproc, self.disturb, self.poll_s = root_pid, nproc, disturb, poll_s
        self.stop = threading.Event()
        self.pids: dict[int, int] = {}
        self.error: BaseException | None = None
        self.started = False

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                pids = worker_pids(self.root_pid)
                if len(pids) >= self.nproc:
                    self.pids = pids
                    break
                self.stop.wait(self.poll_s)
            if self.pids and not self.stop.is_set():
                self.started = True
                self.disturb(dict(self.pids), self.stop)
        except BaseException as exc:  # noqa: BLE001 - reported by _launch after the job
            self.error = exc

    def finish(self, timeout_s: float = 30.0) -> None:
        self.stop.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)


def _stop_tree(proc: subprocess.Popen[str], grace_s: float = 5.0) -> None:
    """Stop torchrun and its workers (each worker runs in a session of its own, so a signal to
    torchrun's process group does not reach them): SIGTERM torchrun, which forwards it, then
    SIGKILL whatever of the tree is still alive after `grace_s`."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_job(
    run_dir: Path,
    nproc: int = 4,
    steps: int = 20,
    profile_steps: int = 5,
    slow_rank: int = -1,
    slow_factor: float = 5.0,
    timeout: float = 120.0,
    *,
    step_sleep: float = 0.0,
    width: int = 512,
    depth: int = 3,
    batch: int = 128,
    extra_env: Mapping[str, str] | None = None,
    job_name: str | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
    shown_run_dir: str | None = None,
    disturb: Disturb | None = None,
    hang_rank: int = -1,
    hang_step: int = -1,
    extra_compute: float = 0.0,
) -> Path:
    """Run the sample job with `nproc` ranks into `run_dir` (must be absent or empty); return `run_dir`.

    `slow_rank` (-1: none) does about `slow_factor` times the forward compute in a
    ``record_function("extra_work")`` region. `extra_env` is added to the job's environment (e.g.
    a fake secret, to check it is not captured). The manifest records the job, the ranks, hosts,
    collectors, the slowdown and the command (``python``, repository-relative paths, and
    `shown_run_dir` in place of `run_dir` when given, so a committed manifest names no temp paths).
    `disturb(pids, stop)` (see the module docstring) acts on the workers from outside while the job
    runs; the manifest then records ``disturbance``: its ``describe()`` if it has one, else its repr.
    `hang_rank`/`hang_step` (-1: none) pass ``--hang-rank/--hang-step`` to the job: that rank never
    joins step `hang_step`'s all-reduce, so the job hangs until `timeout` (and JobFailed is raised).
    `extra_compute` (> 0, with `slow_rank`) passes ``--extra-compute``: about that fraction of the step's
    compute added to the slowed rank's forward, in place of `slow_factor`.
    """
    run_dir = Path(run_dir).resolve()
    if run_dir.exists() and any(run_dir.iterdir()):
        raise JobFailed(f"{run_dir}: run directory is not empty; choose a new one or remove it")
    if not -1 <= slow_rank < nproc:
        raise ValueError(f"slow_rank must be -1 or in [0, {nproc}), got {slow_rank}")
    run_dir.mkdir(parents=True, exist_ok=True)
    job_args = [
        "--steps", str(steps),
        "--profile-steps", str(profile_steps),
        "--slow-rank", str(slow_rank),
        "--slow-factor", str(slow_factor),
        "--step-sleep", str(step_sleep),
        "--width", str(width),
        "--depth", str(depth),
        "--batch", str(batch),
    ]  # fmt: skip
    if extra_compute > 0:
        job_args += ["--extra-compute", str(extra_compute)]
    if hang_rank >= 0:
        job_args += ["--hang-rank", str(hang_rank), "--hang-step", str(hang_step)]
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra_env or {})
    created = datetime.now(UTC).isoformat(timespec="seconds")

    result: JobResult | None = None
    for attempt in range(2):
        command = job_command(run_dir, nproc, free_port(), job_args)
        result = _launch(command, env, timeout, disturb, nproc)
        clash = any(marker in result.output.lower() for marker in _PORT_CLASH)
        if result.returncode == 0 or not clash or attempt == 1:
            break
    assert result is not None
    if result.returncode != 0:
        raise JobFailed(
            f"job exited with status {result.returncode}: {shlex.join(result.command)}\n"
            f"{_tail(result.output)}"
        )
    _check_outputs(run_dir, nproc, steps, profile_steps, result)

    hosts = sorted({_env_record(run_dir, rank)["host"] for rank in range(nproc)})
    extra_passes = max(0, round(slow_factor) - 1)
    fields: dict[str, Any] = {
        "job": job_name
        or f"sample-ddp-gloo-{nproc}rank" + (f"-slow-rank{slow_rank}" if slow_rank >= 0 else ""),
        "ranks": list(range(nproc)),
        "world_size": nproc,
        "hosts": hosts,
        "collectors": COLLECTORS,
        "created": created,
        "backend": "gloo",
        "device": "cpu",
        "steps": steps,
        "profiled_steps": profile_steps,
        "model": {"kind": "mlp", "width": width, "depth": depth, "batch": batch},
        "slowdown": (
            {
                "rank": slow_rank,
                "extra_compute": extra_compute,
                "how": f"no-grad forward passes over round(2.4 x {extra_compute:g} x batch) rows per step on rank "
                f"{slow_rank} (about {extra_compute:.0%} of its step's compute), inside its forward, in "
                "record_function('extra_work')",
            }
            if slow_rank >= 0 and extra_compute > 0
            else {
                "rank": slow_rank,
                "factor": slow_factor,
                "how": f"{extra_passes} extra no-grad forward passes of the model per step on rank "
                f"{slow_rank}, inside its forward, in record_function('extra_work')",
            }
            if slow_rank >= 0 and extra_passes > 0
            else None
        ),
        "command": display_command(result.command, run_dir, shown_run_dir),
        "job_wall_s": round(result.wall_s, 2),
    }
    if disturb is not None:
        describe = getattr(disturb, "describe", None)
        fields["disturbance"] = describe() if callable(describe) else repr(disturb)
    fields.update(manifest_extra or {})
    write_manifest(run_dir, **fields)
    return run_dir


def display_command(command: Sequence[str], run_dir: Path, shown_run_dir: str | None = None) -> str:
    """`command` as a person would type it from the repository root."""
    shown: list[str] = []
    for arg in command:
        if arg == sys.executable:
            arg = "python"
        elif arg == str(run_dir) and shown_run_dir is not None:
            arg = shown_run_dir
        elif arg.startswith(str(REPO) + os.sep):
            arg = os.path.relpath(arg, REPO)
        shown.append(arg)
    return shlex.join(shown)


def _env_record(run_dir: Path, rank: int) -> dict[str, Any]:
    data = json.loads((run_dir / "env" / f"rank-{rank}.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _check_outputs(run_dir: Path, nproc: int, steps: int, profile_steps: int, result: JobResult) -> None:
    missing: list[str] = []
    for rank in range(nproc):
        wanted = [step_file(run_dir, rank), run_dir / "env" / f"rank-{rank}.json"]
        if profile_steps > 0:
            wanted.append(trace_file(run_dir, rank))
        missing += [str(p.relative_to(run_dir)) for p in wanted if not p.is_file()]
        steps_path = step_file(run_dir, rank)
        if steps_path.is_file():
            lines = steps_path.read_text(encoding="utf-8").splitlines()
            if len(lines) != steps:
                missing.append(f"{steps_path.relative_to(run_dir)} ({len(lines)} of {steps} lines)")
    if missing:
        raise JobFailed(
            f"{run_dir}: job finished but wrote no or incomplete {', '.join(missing)}\n{_tail(result.output)}"
        )
