"""Helpers for live tests: launch the real sample job under torchrun (hanging or not) and stop it.

Every process started here runs in its own session and is killed (with all its descendants) by
`stop_job`, which tests call in `finally` blocks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from sample_job_runner import free_port, job_command, worker_pids


def launch_job(run_dir: Path, nproc: int = 4, job_args: Sequence[str] = (), run_id: str | None = None,
               log: Path | None = None, nodes: tuple[int, int, int] | None = None) -> subprocess.Popen[bytes]:
    """Start `torchrun ... sample_job.py` in the background; returns the launcher's Popen.
    `nodes` = (nnodes, node_rank, port) starts one node's launcher of a multi-node job."""
    nnodes, node_rank, port = nodes or (1, 0, free_port())
    cmd = job_command(run_dir, nproc, port, ["--profile-steps", "0", "--width", "64", "--batch", "16", *job_args],
                      nnodes=nnodes, node_rank=node_rank)
    if run_id:
        at = cmd.index("torch.distributed.run") + 1
        cmd[at:at] = ["--rdzv-id", run_id]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out = open(log or run_dir.parent / f"{run_dir.name}.log", "wb")  # noqa: SIM115
    try:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        out.close()


def wait_workers(proc: subprocess.Popen[bytes], nproc: int, timeout: float = 40.0) -> dict[int, int]:
    """rank -> pid once all `nproc` workers are up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = worker_pids(proc.pid)
        if len(pids) >= nproc:
            return pids
        if proc.poll() is not None:
            raise RuntimeError(f"the job exited with status {proc.returncode} before its workers were up")
        time.sleep(0.2)
    raise TimeoutError(f"{nproc} workers were not up within {timeout:.0f}s")


def wait_steps(run_dir: Path, rank: int, steps: int, timeout: float = 40.0) -> None:
    """Wait until `rank` wrote `steps` lines to its step file."""
    path = run_dir / "steps" / f"rank-{rank}.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) >= steps:
            return
        time.sleep(0.2)
    raise TimeoutError(f"rank {rank} did not reach {steps} steps within {timeout:.0f}s")


def stop_job(proc: subprocess.Popen[bytes]) -> None:
    """Kill the launcher and every descendant (workers run in sessions of their own)."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def attach_command(spec: str, out: Path, duration: float, *extra: str) -> list[str]:
    return [sys.executable, "-m", "perftracker", "attach", spec, "--duration", str(duration), "-o", str(out),
            "--quiet", *extra]
