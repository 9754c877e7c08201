"""The gpu_links analyzer (NVLink errors / links down, PCIe replays) and the NVML rank-to-GPU map on gpu.jsonl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.health.gpu_links import analyze_gpu_links
from perftracker.analyzers.health.topology import rank_map
from perftracker.analyzers.rootcause import link_findings

from .conftest import T0_NS, counter_store, gpu_record, write_jsonl

LINKS = {"nvlink_links": 18, "nvlink_active": 18, "nvlink_replay": 0, "nvlink_recovery": 0, "nvlink_crc_flit": 0,
         "nvlink_crc_data": 0, "pcie_replay": 0}


def _record(host: str, gpu: int, i: int, ranks: list[int] | None = None, **metrics: Any) -> dict[str, Any]:
    rec = gpu_record(host, gpu, T0_NS + i * 10 * 10**9, **{**LINKS, **metrics})
    if ranks is not None:
        rec["ranks"] = ranks
    return rec


def _checks(findings: list[Finding]) -> set[tuple[str, int, Severity]]:
    return {(str(f.evidence["check"]), int(f.evidence["gpu"]), f.severity) for f in findings}


def test_recovery_is_critical_slow_crc_is_info_and_a_counter_reset_is_no_rise(tmp_path: Path) -> None:
    # GIVEN 4 GPUs sampled every 10 s for 100 s: GPU 0 recovers its NVLink twice; GPU 1 adds 50 CRC data
    # errors (0.5/s, far under 100/s) and nothing else; GPU 2's counters are reset to 0 halfway (nvidia-smi
    # nvlink -re) and stay there; GPU 3 gains 3 PCIe replays (1.8/min, under 8/min)
    recs = []
    for i in range(11):
        recs.append(_record("node-a", 0, i, nvlink_recovery=0 if i < 4 else 1 if i < 8 else 2))
        recs.append(_record("node-a", 1, i, nvlink_crc_data=5 * i))
        recs.append(_record("node-a", 2, i, nvlink_crc_flit=900 if i < 5 else 0, nvlink_replay=40 if i < 5 else 0))
        recs.append(_record("node-a", 3, i, pcie_replay=100 + (3 if i >= 6 else 0)))
    findings = analyze_gpu_links(Analysis(counter_store([write_jsonl(tmp_path / "node-a.gpu.jsonl", recs)])))
    # THEN the recovery is critical, the slow CRC and PCIe replay rises only informational, the reset nothing
    assert _checks(findings) == {("nvlink_recovery", 0, Severity.CRITICAL), ("nvlink_errors", 1, Severity.INFO),
                                 ("pcie_replay", 3, Severity.INFO)}
    rec = next(f for f in findings if f.evidence["check"] == "nvlink_recovery")
    assert rec.evidence["nvlink_recovery_increase"] == 2 and rec.evidence["first_rise_ns"] == T0_NS + 4 * 10**10
    assert next(f for f in findings if f.evidence["gpu"] == 1).evidence["crc_rate_per_s"] == 0.5


def test_links_down_against_peers_and_hosts_without_nvlink_in_use(tmp_path: Path) -> None:
    # GIVEN node-a: GPU 1 loses 2 of its 18 NVLinks from the 6th sample on while GPUs 0, 2, 3 keep 18;
    # node-b: every GPU 12 of 18 active (same on all: an NVSwitch down, or links unconnected on this board);
    # node-c: NVLink-capable GPUs with no link active at all (no bridge): nothing to report
    recs = []
    for i in range(10):
        for g in range(4):
            recs.append(_record("node-a", g, i, nvlink_active=16 if g == 1 and i >= 5 else 18))
            recs.append(_record("node-b", g, i, nvlink_active=12))
            recs.append(_record("node-c", g, i, nvlink_links=4, nvlink_active=0))
    findings = analyze_gpu_links(Analysis(counter_store([write_jsonl(tmp_path / "all.gpu.jsonl", recs)])))
    got = {(f.hosts[0], str(f.evidence["check"]), int(f.evidence["gpu"]), f.severity) for f in findings}
    # THEN node-a GPU 1 is critical (below its peers), node-b's GPUs are warnings, node-c has none
    assert got == {("node-a", "nvlink_down", 1, Severity.CRITICAL)} | {
        ("node-b", "nvlink_down", g, Severity.WARNING) for g in range(4)}
    a1 = next(f for f in findings if f.hosts == ("node-a",))
    assert a1.evidence["share_of_samples"] == 0.5 and a1.evidence["peers_nvlink_active"] == 18
    assert a1.evidence["first_down_ns"] == T0_NS + 5 * 10**10 and "16 of 18 active" in a1.title


def test_nvml_ranks_map_each_rank_to_its_own_gpu_despite_stray_contexts(tmp_path: Path) -> None:
    # GIVEN NVML listing every rank on GPU 0 (each process touched GPU 0 before set_device) and ranks 0..2
    # on GPUs 3..1 from the second sample on: rank 3 runs on GPU 0
    recs = [_record("node-a", 0, i, ranks=[0, 1, 2, 3]) for i in range(3)]
    recs += [_record("node-a", g, i, ranks=[3 - g] if i else []) for g in (1, 2, 3) for i in range(3)]
    store = counter_store([write_jsonl(tmp_path / "node-a.gpu.jsonl", recs)])
    # WHEN the rank map is built from nothing but these samples
    rmap = rank_map(store)
    # THEN each rank gets the GPU hosting the fewest ranks among those it was seen on, and the host NVML saw
    got = {int(r): (int(g), str(s), str(h), str(hs)) for r, g, s, h, hs in
           zip(rmap["rank"], rmap["gpu"], rmap["gpu_source"], rmap["host"], rmap["host_source"])}
    assert got == {0: (3, "nvml", "node-a", "nvml"), 1: (2, "nvml", "node-a", "nvml"),
                   2: (1, "nvml", "node-a", "nvml"), 3: (0, "nvml", "node-a", "nvml")}
    # AND the device rows carry the union of the ranks seen on each GPU
    ranks = dict(zip(store["devices"]["device"], store["devices"]["ranks"]))
    assert ranks == {"gpu:0": "0,1,2,3", "gpu:1": "2", "gpu:2": "1", "gpu:3": "0"}


def test_nvlink_errors_explain_a_communication_straggler_on_that_gpu(tmp_path: Path) -> None:
    # GIVEN GPU 1 of node-a (rank 1, per NVML) with NVLink replays rising, GPU 0 (rank 0) clean,
    recs = [_record("node-a", g, i, ranks=[g], nvlink_replay=3 * i if g == 1 else 0) for g in (0, 1) for i in range(6)]
    store = counter_store([write_jsonl(tmp_path / "node-a.gpu.jsonl", recs)])
    # and a communication straggler finding on rank 1
    straggler = Finding(analyzer="straggler", severity=Severity.WARNING, title="Rank 1 is a communication straggler",
                        recommendation="Look at rank 1's links.", evidence={"kind": "communication", "share_last": 0.9},
                        ranks=(1,), hosts=("node-a",), cost=Cost(0.05, 0.1), key="straggler:1")
    # WHEN joined into root-cause chains
    linked = link_findings(Analysis(store), [straggler, *analyze_gpu_links(Analysis(store))])
    s, errors = linked[0], next(f for f in linked if f.evidence.get("check") == "nvlink_errors")
    # THEN the NVLink finding is the straggler's explaining cause, and carries its cost and rank
    chain = s.evidence["root_cause"]["chain"]
    assert [(c["id"], c["explains"]) for c in chain] == [(errors.id, True)]
    assert s.evidence["root_cause"]["location"]["gpu"] == 1
    assert s.recommendation.startswith("Likely cause: GPU 1 on host node-a (rank 1) NVLink errors rising: 15 replays")
    assert errors.cost == straggler.cost and errors.ranks == (1,)
