"""The parts of `perftracker sanity` that make a verdict one can act on: one writer through the store's lease and
compare-and-set, the node's CPU and link facts (cgroup v1 / v2 quota, throttling, PSI, tc shaping) turned into
the cause a finding says, the own-spread test, and the scheduler files made from the judgement alone."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from perftracker.analyzers.sanity.causes import cpu_cause, link_cause
from perftracker.analyzers.sanity.judge import judge
from perftracker.analyzers.sanity.results import SanityResults
from perftracker.cli.sanity import scheduler_files, write_outputs
from perftracker.collectors.sanity.node import cpu_during, cpu_sample, parse_qdiscs

# real `tc qdisc show dev eth0` output on the namespace lab (node-b shaped by scripts/netlab.py), and netem's
TBF = "qdisc tbf 8001: root refcnt 2 rate 20Mbit burst 8Kb lat 100ms \n"
NETEM = "qdisc netem 8002: root refcnt 2 limit 1000 delay 50ms  10ms rate 1Gbit\n"
DEFAULT = "qdisc noqueue 0: root refcnt 2 \nqdisc pfifo_fast 0: root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1\n"


def test_tc_output_is_read_as_the_link_s_shaping() -> None:
    # GIVEN tc's lines for a tbf, a netem and the default queueing disciplines
    # THEN the shapers are read with their rate (Mbit/s) and delay (ms); the defaults are no shaping
    assert [(q["kind"], q["rate_mbit"]) for q in parse_qdiscs(TBF)] == [("tbf", 20.0)]
    (netem,) = parse_qdiscs(NETEM)
    assert netem["delay_ms"] == 50.0 and netem["rate_mbit"] == 1000.0
    assert parse_qdiscs(DEFAULT) == []


def _cgroup_v1(root: Path, quota: int, period: int, throttled: int, periods: int) -> tuple[Path, Path]:
    proc, cg = root / "proc", root / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "pressure").mkdir()
    (proc / "self" / "cgroup").write_text("4:memory:/\n1:cpu:/lab-node-b\n0::/\n")
    (proc / "pressure" / "cpu").write_text("some avg10=61.50 avg60=40.00 avg300=8.00 total=1\nfull avg10=0.00\n")
    for folder, q in ((cg / "cpu", -1), (cg / "cpu" / "lab-node-b", quota)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.cfs_quota_us").write_text(f"{q}\n")
        (folder / "cpu.cfs_period_us").write_text(f"{period}\n")
    (cg / "cpu" / "lab-node-b" / "cpu.stat").write_text(
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled * 80_000_000}\n")
    return proc, cg


def test_a_cgroup_v1_quota_and_its_throttling_are_read(tmp_path: Path) -> None:
    # GIVEN this process in a v1 cgroup held to 20% of a core, throttled in 40 of 50 periods while measuring
    proc, cg = _cgroup_v1(tmp_path, 20_000, 100_000, throttled=10, periods=20)
    before = cpu_sample(proc, cg)
    stat = cg / "cpu" / "lab-node-b" / "cpu.stat"
    stat.write_text("nr_periods 70\nnr_throttled 50\nthrottled_time 4000000000\n")
    # WHEN the sample after is compared with the one before
    during = cpu_during(before, cpu_sample(proc, cg))
    # THEN the quota (0.2 CPU, where), the throttled share of periods and the machine's CPU pressure are said
    assert (during["quota_cores"], during["quota_at"], during["cgroup_version"]) == (0.2, "/lab-node-b", "v1")
    assert during["throttled_share"] == 0.8 and during["psi_some_avg10"] == 61.5


def test_a_cgroup_v2_cpu_max_set_on_a_parent_is_the_quota(tmp_path: Path) -> None:
    # GIVEN a v2 cgroup /job/rank0 whose parent /job has cpu.max "50000 100000" and its own cpu.pressure
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/job/rank0\n")
    (cg / "job" / "rank0").mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    (cg / "job" / "cpu.max").write_text("50000 100000\n")
    (cg / "job" / "rank0" / "cpu.max").write_text("max 100000\n")
    (cg / "job" / "rank0" / "cpu.stat").write_text("usage_usec 9\nnr_periods 10\nnr_throttled 5\nthrottled_usec 2000\n")
    (cg / "job" / "rank0" / "cpu.pressure").write_text("some avg10=33.00 avg60=1 avg300=1 total=1\n")
    got = cpu_sample(proc, cg)
    # THEN the tightest quota on the way up is the node's: half a CPU, set on /job
    assert (got["quota_cores"], got["quota_at"], got["cgroup_version"]) == (0.5, "/job", "v2")
    assert got["throttled_s"] == 0.002 and got["cgroup_psi_some_avg10"] == 33.0
    assert "psi" in got["errors"]  # no /proc/pressure here: named, not raised


def test_a_quota_only_one_node_has_is_its_cause_and_a_shaper_only_one_node_has_is_its_link_s() -> None:
    # GIVEN node-b's rank with a 0.2 CPU quota throttled 80% of periods, its peers with none
    mine = [{"host": "node-b", "cpu": {"quota_cores": 0.2, "quota_at": "/lab-node-b", "throttled_share": 0.8}}]
    peers = [{"host": h, "cpu": {"quota_cores": None, "throttled_share": None}} for h in ("node-a", "node-c")]
    said, facts = cpu_cause(mine, peers)
    # THEN the cause says the quota and the throttling
    assert said == "a CPU quota of 0.2 CPU is set on its cgroup /lab-node-b, throttled 80% of periods during the check"
    assert facts["cpu_quota_cores"] == 0.2
    # AND a quota every node has (a container limit) is not said as the cause; its throttling still is
    assert cpu_cause(mine, [{"cpu": {"quota_cores": 0.2}}] * 2)[0] == "its cgroup was throttled 80% of periods during the check"
    # GIVEN node-b's eth0 shaped by tbf, its peers' not
    nodes = {h: {"nics": [{"name": "eth0", "operstate": "up", "speed_mbps": 10000,
                           "qdiscs": parse_qdiscs(TBF if h == "node-b" else DEFAULT)}]} for h in ("a", "node-b", "c")}
    said, facts = link_cause("node-b", nodes)
    assert said == "its eth0 egress is shaped by tc tbf: held to 20 Mbit/s" and facts["shaping"]["rate_mbit"] == 20.0


def _record(rank: int, host: str, gemm: float, repeats: list[float]) -> dict[str, object]:
    return {"rank": rank, "local_rank": 0, "host": host, "device": "cpu", "device_name": "cpu",
            "figures": {"gemm_fp32_tflops": gemm}, "repeats": {"gemm_fp32_tflops": repeats}, "errors": {},
            "pairs": [], "node": {}, "cut": []}


def test_a_device_below_its_peers_by_less_than_its_own_repeats_spread_is_not_named() -> None:
    # GIVEN 10 nodes (the 15% floor of many peers), n0's best repeat at 75% of its peers' median
    peers = {i: _record(i, f"n{i}", 1.0 + 0.001 * i, [1.0, 1.0 + 0.001 * i]) for i in range(1, 10)}
    hosts = [f"n{i}" for i in range(10)]
    noisy = SanityResults(hosts=hosts, records={0: _record(0, "n0", 0.75, [0.75, 0.2, 0.5]), **peers})
    steady = SanityResults(hosts=hosts, records={0: _record(0, "n0", 0.75, [0.75, 0.74, 0.73]), **peers})
    # THEN the steady one is named (its deficit beats its own noise), with its repeats and spread as evidence
    found = [f for f in judge(steady).findings if f.hosts == ("n0",)]
    assert len(found) == 1 and found[0].evidence["figures"][0]["repeats"] == [0.75, 0.74, 0.73]
    # AND the one whose own repeats spread wider than its deficit is not: its noise, not a slow device
    assert "n0" not in judge(noisy).node_status


def test_the_scheduler_files_are_made_from_the_same_lists_as_findings_json(tmp_path: Path) -> None:
    # GIVEN a judged check with one node to exclude (two ranks on node n1)
    records = {0: _record(0, "n0", 1.0, []), 1: _record(1, "n1", 1.0, []), 2: _record(2, "n2", 1.0, [])}
    results = SanityResults(hosts=["n0", "n1", "n2", "n1"], records=records, time_box_s=20)
    verdict = judge(results)
    assert verdict.exclude == ["n1"]  # rank 3 sent nothing
    write_outputs(tmp_path, results, verdict)
    summary = json.loads((tmp_path / "findings.json").read_text())["summary"]
    # THEN exclude.txt, the Slurm line and the hostfile say exactly what summary.exclude / keep say
    assert (tmp_path / "exclude.txt").read_text().split() == summary["exclude"] == ["n1"]
    assert (tmp_path / "slurm_exclude.txt").read_text() == "--exclude=n1\n"
    assert [line.split()[0] for line in (tmp_path / "hostfile").read_text().splitlines()] == summary["keep"]
    assert scheduler_files(verdict, results.hosts)["hostfile"] == "n0 slots=1\nn2 slots=1\n"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_one_writer_rank_0_s_claim_wins_and_a_fallback_takes_over_only_once_its_lease_lapsed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch_dist = pytest.importorskip("torch.distributed")
    import torch

    from perftracker.collectors.sanity import handover
    from perftracker.collectors.sanity.comm import Comm
    from perftracker.collectors.sanity.launch import Launch

    monkeypatch.setattr(handover, "LAPSE_S", 0.6)
    monkeypatch.setattr(handover, "RENEW_S", 0.1)
    port = _free_port()
    server = torch_dist.TCPStore("127.0.0.1", port, 3, True, wait_for_workers=False)
    comms = []
    for rank in range(3):
        comm = Comm(Launch(rank, 3, 0, "127.0.0.1", port), torch.device("cpu"), 5.0)
        comm.store = torch_dist.TCPStore("127.0.0.1", port, 3, False) if rank else server
        comm.hosts = ["a", "b", "c"]
        comms.append(comm)
    # GIVEN rank 0 alive and renewing its lease, slow to write
    lease = handover.Lease(comms[0])
    assert handover.claim(comms[0]) is True
    # WHEN rank 1 waits for the writer past its deadline
    t0 = time.monotonic()
    assert handover.wait_for_writer(comms[1], {"rank": 1}, deadline=t0, hard_end=t0 + 1.5) is None
    # THEN it never takes over while the lease runs (a slow rank 0 is not a dead one)
    assert handover.claim(comms[2]) is False
    # GIVEN rank 0 then dies (its lease stops) and rank 2 posted its result
    lease.stop()
    handover.post(comms[2], {"rank": 2, "host": "c"})
    # WHEN rank 1 waits again
    taken = handover.wait_for_writer(comms[1], {"rank": 1, "host": "b"}, deadline=time.monotonic(),
                                     hard_end=time.monotonic() + 5)
    # THEN it takes over only after the lease lapsed, through the store, with every posted result
    assert taken is not None and sorted(taken[0]) == [1, 2]
    assert taken[1] is not None
    # AND no third rank can claim it too, nor a rank 0 that comes back
    assert handover.claim(comms[2], "0") is False and handover.claim(comms[0]) is False
    taken[1].stop()
    # AND once written, the others leave at once
    handover.mark_written(comms[1])
    assert handover.wait_for_writer(comms[2], {}, time.monotonic(), time.monotonic() + 5) is None
