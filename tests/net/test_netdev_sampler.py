"""The attach/run sampler of Ethernet counters: the job's interfaces from its settings, a first sample at start,
every sample on disk as soon as it is taken, and link state changes timed between samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from net.conftest import FakeNetNode
from perftracker.live.attach.discovery import find_job
from perftracker.live.collectors import SamplerOptions, build_samplers
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.netdev_sampler import NetdevSampler


def _worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", **env})


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sampler_follows_the_jobs_interface_from_the_first_moment_and_times_a_flap(tmp_path: Path) -> None:
    # GIVEN a rank whose GLOO_SOCKET_IFNAME is eth1, on a node with lo, eth0 and eth1
    node = FakeNetNode(tmp_path / "node", ifaces=("lo", "eth0", "eth1"))
    proc = _worker({"GLOO_SOCKET_IFNAME": "eth1"})
    try:
        time.sleep(0.2)
        ctx = LiveContext(run_dir=tmp_path / "run", job=find_job(f"pid:{proc.pid}", "node-b"), host="node-b",
                          sysfs_root=node.sys)
        sampler = NetdevSampler(interval_s=0.4, proc_root=node.proc, qdisc_reader=lambda name: None, watch_s=0.05)
        out = tmp_path / "run" / "counters" / "node-b.net.jsonl"
        # WHEN the sampler starts
        started = time.time_ns()
        sampler.start(ctx)
        # THEN the first sample is on disk at once, of eth1 only, saying why
        first = _records(out)
        assert len(first) == 1 and list(first[0]["ifaces"]) == ["eth1"]  # type: ignore[call-overload]
        assert first[0]["ifaces"]["eth1"]["why"] == "GLOO_SOCKET_IFNAME=eth1"  # type: ignore[index]
        assert 0 <= int(first[0]["ts_ns"]) - started < 2 * 10**9  # type: ignore[call-overload]
        # WHEN eth1 goes down between two samples, and the next sample is taken an interval later
        node.set("eth1", operstate="down", flags="0x1002", carrier=0, carrier_changes=3)
        down_at = time.time_ns()
        time.sleep(0.4)
        sampler.sample(ctx)  # the session's loop calls it every interval
        sampler.stop(ctx)
    finally:
        proc.kill()
        proc.wait()
    records = _records(out)
    # THEN the watcher recorded the change within a tenth of a second, before the next full sample
    changes = [r for r in records if "changed_within_s" in r]
    assert len(changes) == 1 and changes[0]["ifaces"] == {  # type: ignore[comparison-overlap]
        "eth1": {"operstate": "down", "carrier": 0, "admin_up": False}}
    assert 0 <= int(changes[0]["ts_ns"]) - down_at < 300_000_000  # type: ignore[call-overload]
    # AND the full sample after it has the counters again, still of eth1
    assert records[-1]["ifaces"]["eth1"]["counters"]["carrier_changes"] == 3  # type: ignore[index]
    assert sampler.status().startswith("1 interface(s) (eth1)")


def test_without_settings_or_peers_every_interface_but_lo_is_sampled_and_said_so(tmp_path: Path) -> None:
    # GIVEN a rank with no socket settings and no connections
    node = FakeNetNode(tmp_path / "node", ifaces=("lo", "eth0", "ib0"))
    proc = _worker({})
    try:
        time.sleep(0.2)
        ctx = LiveContext(run_dir=tmp_path / "run", job=find_job(f"pid:{proc.pid}", "vm"), host="vm",
                          sysfs_root=node.sys)
        sampler = NetdevSampler(proc_root=node.proc, qdisc_reader=lambda name: None, watch_s=0)
        # WHEN sampled and stopped
        sampler.start(ctx)
        sampler.stop(ctx)
    finally:
        proc.kill()
        proc.wait()
    # THEN eth0 and ib0 were sampled with no reason, and a note says the job's interfaces were not known
    rec = _records(tmp_path / "run" / "counters" / "vm.net.jsonl")[0]
    assert sorted(rec["ifaces"]) == ["eth0", "ib0"]  # type: ignore[call-overload]
    assert all("why" not in v for v in rec["ifaces"].values())  # type: ignore[attr-defined]
    assert any("no interface could be tied to the job" in n for n in ctx.notes)


def test_attach_and_run_sample_the_network_first_and_every_second_by_default() -> None:
    # GIVEN the default sampler options of attach (and run, which builds them the same way)
    samplers = build_samplers(SamplerOptions())
    # THEN the network sampler comes first (its first sample as the session starts), every second
    assert samplers[0].name == "net" and samplers[0].interval_s == 1.0
    assert "net" not in [s.name for s in build_samplers(SamplerOptions(net=False))]
