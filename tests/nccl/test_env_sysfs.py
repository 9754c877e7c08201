"""Configuration sources: env capture allow-list, env files / job specs, run-dir snapshots, sysfs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from api_helpers import analyzed

from perftracker.collectors.counters.sysfs import read_sysfs
from perftracker.collectors.env import (
    capture_process_env,
    load_env_snapshots,
    parse_env_text,
    read_env_file,
)
from perftracker.redaction import safe_env

from .conftest import FIXTURES, build_sysfs, lingjun_node

SAMPLE_ENV = Path(__file__).resolve().parents[2] / "sample_traces" / "gloo-4rank-stall-rank2" / "env"


def test_allow_list_drops_secrets_and_unrelated() -> None:
    env = {"NCCL_IB_HCA": "mlx5", "RANK": "3", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "x",
           "NCCL_API_TOKEN": "t", "MASTER_ADDR": "10.0.0.1", "UCX_TLS": "rc", "CUDA_PASSWORD": "p",
           "TORCH_STORE_URL": "http://user:pw@host/x"}
    assert safe_env(env) == {"NCCL_IB_HCA": "mlx5", "RANK": "3", "MASTER_ADDR": "10.0.0.1", "UCX_TLS": "rc"}


def test_capture_process_env() -> None:
    # GIVEN a child process started with NCCL settings and a secret WHEN its environment is captured
    import subprocess
    import sys

    env = {"PATH": os.environ.get("PATH", ""), "NCCL_IB_TC": "136", "NCCL_TEST_SECRET": "no", "HOME": "/x"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"], env=env)
    try:
        import time

        import psutil

        deadline = time.monotonic() + 10  # until the child has exec'd (before that it shows our environment)
        while time.monotonic() < deadline and "time.sleep(20)" not in " ".join(psutil.Process(child.pid).cmdline()):
            time.sleep(0.01)
        got = capture_process_env(child.pid)
    finally:
        child.kill()
        child.wait()
    # THEN only the allow-listed, non-secret part comes back
    assert got == {"NCCL_IB_TC": "136"}


def test_env_file_and_job_spec_parsing() -> None:
    # GIVEN a job spec mixing inline assignments, mpirun -x, export with quotes and a comment
    got = read_env_file(FIXTURES / "job_spec.sh")
    assert got["NCCL_DEBUG"] == ("INFO", 1)
    assert "MY_API_TOKEN" not in got and "AWS_SECRET_ACCESS_KEY" not in got
    assert got["NCCL_IB_HCA"][0] == "mlx5_0, mlx5_1"  # the stray space is kept: it matters to NCCL
    assert got["NCCL_IB_TC"][0] == "0136"
    assert got["NCCL_SOCKET_IFNAME"][0] == "eth0"
    assert got["NCCL_IB_TIMEOUT"][0] == "22"
    assert parse_env_text("NCCL_IB_HCA=mlx5_0, mlx5_1\n") == [("NCCL_IB_HCA", "mlx5_0, mlx5_1", 1)]


def test_run_dir_env_snapshots(tmp_path: Path) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "rank-1.json").write_text(json.dumps({"rank": 1, "host": "n1", "pid": 7,
                                                              "env": {"NCCL_IB_TC": "136", "SECRET_X": "s"}}))
    (tmp_path / "env" / "rank-2.json").write_text("{broken")
    frame, notes = load_env_snapshots(sorted((tmp_path / "env").glob("*.json")))
    assert list(frame["key"]) == ["NCCL_IB_TC"] and int(frame["rank"].iloc[0]) == 1
    assert len(notes) == 1 and notes[0].level == "warning"


def test_sysfs_fake_tree_like_the_kernel(tmp_path: Path) -> None:
    # GIVEN a fake sysfs with a RoCE device (empty GID slots are dangling links) and an IB device
    build_sysfs(tmp_path, [{"name": "mlx5_0", "netdev": "eth0", "ip": "10.0.0.5"},
                           {"name": "mlx5_1", "link_layer": "InfiniBand", "netdev": "ib0"}], ifaces=("lo", "docker0"))
    facts = read_sysfs(tmp_path, host="n0")
    devs = {d["device"]: d for d in facts["rdma"]}
    port = devs["mlx5_0"]["ports"][0]
    assert port["link_layer"] == "Ethernet" and port["active"] and port["gid_table_len"] == 8
    assert [g["index"] for g in port["gids"]] == [0, 1, 2, 3]
    assert port["gids"][3] == {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:0005", "ip": "10.0.0.5",
                               "type": "RoCE v2", "ndev": "eth0"}
    assert devs["mlx5_0"]["netdevs"] == ["eth0"]
    nets = {n["name"]: n for n in facts["net"]}
    assert set(nets) == {"eth0", "ib0", "lo", "docker0"} and nets["eth0"]["addresses"] == ["10.0.0.5", "fe80::a8a:41fe:ff21:a75e"]


def test_sysfs_missing_root_is_empty(tmp_path: Path) -> None:
    facts = read_sysfs(tmp_path / "nothing")
    assert facts["rdma"] == [] and facts["net"] == [] and not facts["available"]


def test_analyze_on_the_node_reads_its_sysfs_into_the_run(tmp_path: Path) -> None:
    # GIVEN the environment snapshots of a run, analyzed on a node with RDMA devices (--sysfs-root)
    run = tmp_path / "run"
    shutil.copytree(SAMPLE_ENV, run / "env")
    root = lingjun_node(tmp_path / "sys")
    # WHEN analyzed (this used to stop with an internal error: the coverage read the sysfs list as one node)
    result = analyzed(run, tmp_path / "out", cache=False, sysfs_root=root, sysfs_host="node-7")
    # THEN the node's facts are in the run's RunInfo under the name the command gave, and the RDMA
    # network counts as judged from sysfs
    (node,) = result.store.run_info.sysfs
    assert node["host"] == "node-7" and [d["device"] for d in node["rdma"]] == [f"mlx5_{i}" for i in range(4)]
    judged = {a["area"]: a["from"] for a in result.document["summary"]["coverage"]["judged"]}
    assert judged["RDMA network"] == ["sysfs"]
