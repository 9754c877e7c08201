"""attach's collectors on real processes: NCCL log and output following, RDMA counters from a fake sysfs
tree whose counters advance, and a clean stop on Ctrl-C that keeps everything."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from health.conftest import FakeRdmaNode

from perftracker.live.attach.discovery import find_job
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import FollowSampler, resolve_nccl_debug_file
from perftracker.live.samplers.rdma_sampler import RdmaSampler

WORKER = """
import os, sys, time
path = os.environ["NCCL_DEBUG_FILE"].replace("%h", os.uname().nodename).replace("%p", str(os.getpid()))
with open(path, "a") as log:
    for i in range(600):
        log.write(f"{os.uname().nodename}:{os.getpid()}:{os.getpid()} [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC line {i}\\n")
        log.flush()
        print(f"step {i}", flush=True)
        time.sleep(0.05)
"""


def start_worker(tmp: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_FILE": str(tmp / "nccl.%h.%p.log"), "TORCHELASTIC_RUN_ID": f"collectors-{os.getpid()}"}
    out = open(tmp / "worker.out", "wb")
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not list(tmp.glob("nccl.*.log")):
        time.sleep(0.05)
    return proc


def test_nccl_debug_file_pattern() -> None:
    assert resolve_nccl_debug_file("/x/nccl.%h.%p.log", "node-1", 42) == "/x/nccl.node-1.42.log"
    assert resolve_nccl_debug_file("/x/100%%.%p", "h", 7) == "/x/100%.7"


def test_follow_copies_the_nccl_log_and_the_output_as_they_grow(tmp_path: Path) -> None:
    # GIVEN a running rank that writes an NCCL_DEBUG_FILE and prints to a file
    proc = start_worker(tmp_path)
    try:
        ctx = LiveContext(run_dir=tmp_path / "run", job=find_job(f"pid:{proc.pid}", socket.gethostname()),
                          host=socket.gethostname())
        follow = FollowSampler()
        # WHEN the follower starts and samples twice with time in between
        follow.start(ctx)
        follow.sample(ctx)
        time.sleep(0.6)
        follow.sample(ctx)
    finally:
        proc.kill()
        proc.wait()
    # THEN the run directory holds both copies, growing, complete up to the last sample
    nccl = tmp_path / "run" / "nccl" / f"{socket.gethostname()}.{proc.pid}.log"
    output = tmp_path / "run" / "output" / "rank-0.stdout.log"
    assert nccl.read_text().count("NCCL INFO Channel") >= 5
    assert output.read_text().count("step ") >= 5
    assert "job output" not in " ".join(ctx.notes)  # the output is a file: it was collected


def test_rdma_sampler_records_advancing_counters(tmp_path: Path) -> None:
    # GIVEN a fake node with 4 InfiniBand ports whose counters advance between samples
    node = FakeRdmaNode(tmp_path / "sys", host=socket.gethostname())
    ctx = LiveContext(run_dir=tmp_path / "run", job=_empty_job(),
                      host=socket.gethostname(), sysfs_root=tmp_path / "sys")
    sampler = RdmaSampler(interval_s=1.0)
    sampler.start(ctx)
    for _ in range(3):
        sampler.sample(ctx)
        node.tick(1.0, gbps=100.0)
        node.write()
    # THEN one line per port per sample, and the transmitted-data counter grows
    lines = [json.loads(x) for x in (tmp_path / "run" / "counters" / f"{socket.gethostname()}.rdma.jsonl")
             .read_text().splitlines()]
    assert len(lines) == 12 and {r["device"] for r in lines} == {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}
    xmit = [r["counters"]["port_xmit_data"] for r in lines if r["device"] == "mlx5_0"]
    assert xmit == sorted(xmit) and xmit[-1] > xmit[0]
    assert sampler.status().startswith("4 port(s)")


def test_rdma_sampler_without_devices_says_so(tmp_path: Path) -> None:
    ctx = LiveContext(run_dir=tmp_path / "run", job=_empty_job(), host="h", sysfs_root=tmp_path / "empty")
    sampler = RdmaSampler()
    sampler.start(ctx)
    sampler.sample(ctx)
    assert any("no RDMA devices" in n for n in ctx.notes)
    assert not (tmp_path / "run" / "counters").exists()


def _empty_job():  # type: ignore[no-untyped-def]
    from perftracker.live.attach.discovery import Job

    return Job([])


def test_ctrl_c_stops_cleanly_and_keeps_everything(tmp_path: Path) -> None:
    # GIVEN attach running (no duration) against a live rank
    proc = start_worker(tmp_path)
    attach = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{proc.pid}", "--duration", "0",
                               "-o", str(tmp_path / "run"), "--quiet", "--stack-interval", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((tmp_path / "run").glob("stacks/*/rank-0.json")):
            time.sleep(0.2)
        # WHEN the user presses Ctrl-C
        attach.send_signal(signal.SIGINT)
        out, err = attach.communicate(timeout=120)
    finally:
        if attach.poll() is None:
            attach.kill()
        proc.kill()
        proc.wait()
    # THEN attach stops cleanly (no traceback), says so, and everything collected is there
    assert attach.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "Stopped (interrupted)" in out
    run = tmp_path / "run"
    assert (run / "env" / "rank-0.json").is_file() and (run / "manifests").is_dir()
    assert list(run.glob("stacks/*/rank-0.json")) and list(run.glob("nccl/*.log"))
    manifest = json.loads(next((run / "manifests").glob("*.json")).read_text())
    assert manifest["ended_because"] == "interrupted"


def test_unreadable_processes_get_advice_that_fits_who_runs_perftracker(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from perftracker.live.attach import discovery

    # GIVEN two processes whose environment could not be read
    # WHEN the hint is written for root, and for an ordinary user
    monkeypatch.setattr(discovery.os, "geteuid", lambda: 0)
    as_root = discovery.denied_hint([7, 3])
    monkeypatch.setattr(discovery.os, "geteuid", lambda: 1000)
    as_user = discovery.denied_hint([7, 3])
    # THEN root is not told to run as root, and both name the pids
    assert "even as root" in as_root and "run as the job's user or as root" not in as_root and "pid 3, 7" in as_root
    assert "run as the job's user or as root" in as_user and "pid 3, 7" in as_user


def test_torchrun_static_run_id_none_is_not_shown_as_a_job_name() -> None:
    from perftracker.live.attach.discovery import Job, job_label

    # GIVEN jobs with torchrun's static default run id "none", a real run id, and neither
    # THEN only the real run id names the job; the others fall back to the launcher pid
    assert job_label(Job([], launcher_pid=42, run_id="none")) == "launcher pid 42"
    assert job_label(Job([], launcher_pid=42, run_id="llama-7b")) == "llama-7b"
    assert job_label(Job([])) == "(no run id)"
