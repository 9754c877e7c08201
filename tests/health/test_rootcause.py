"""Stragglers joined with host evidence: one ranked chain from the slow rank to its GPU or NIC."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from api_helpers import analyzed
from synth import SynthSpec, generate

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity, rank_findings
from perftracker.analyzers.health.bandwidth import bus_factor, collective_bandwidth
from perftracker.analyzers.health.rdma import analyze_rdma
from perftracker.analyzers.health.topology import rank_map
from perftracker.analyzers.rootcause import link_findings
from perftracker.collectors.counters.inputs import load_counter_inputs
from perftracker.collectors.loading import LoadOptions
from perftracker.store import Store
from perftracker.store.schema import conform

from .conftest import FIXTURES, FakeRdmaNode, gpu_record, write_jsonl

MINE = ("gpu_health", "rdma", "topology", "bandwidth")


def _trace_start_ns(traces: Path) -> int:
    """Wall-clock epoch ns of the first traced event (baseTimeNanoseconds + its ts)."""
    from perftracker.collectors.loading import load_path

    store = load_path(traces, LoadOptions(workers=1, cache_dir=None))
    return int(store.ranks["base_ns"].min()) + int(store.events["start_ns"].min())


def _run_dir(tmp_path: Path, stragglers: dict[int, float], throttle_gpu: int | None,
             samples_shift_s: float = -5.0) -> Path:
    """Synthetic GPU traces and NVML samples (20 s at 1 Hz) from `samples_shift_s` around the traced steps."""
    run = tmp_path / "run"
    generate(SynthSpec(ranks=4, steps=6, kernels_per_step=8, stragglers=stragglers), run / "traces",
             truth_path=tmp_path / "truth.json")
    samples_start_ns = _trace_start_ns(run / "traces") + int(samples_shift_s * 1e9)
    for r in range(4):
        env = {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "4", "NCCL_IB_HCA": f"=mlx5_{r}"}
        (run / "env").mkdir(parents=True, exist_ok=True)
        (run / "env" / f"rank-{r}.json").write_text(json.dumps({"env": env, "host": "node-a", "pid": 100 + r,
                                                                "rank": r}))
    recs = []
    for i in range(20):
        for g in range(4):
            hot = g == throttle_gpu and i % 5 < 2  # 40% of the samples
            recs.append(gpu_record("node-a", g, samples_start_ns + i * 10**9, sm_clock_mhz=1410 if hot else 1980,
                                   temp_c=89 if hot else 64, clock_event_reasons=0x40 if hot else 0))
    write_jsonl(run / "counters" / "node-a.gpu.jsonl", recs)
    node = FakeRdmaNode(tmp_path / "sys", "node-a")
    write_jsonl(run / "counters" / "node-a.rdma.jsonl", node.snap())
    for _ in range(4):
        node.tick(10.0, gbps=250.0)
        write_jsonl(run / "counters" / "node-a.rdma.jsonl", node.snap())
    return run


def test_straggler_with_throttled_gpu_is_one_ranked_chain(tmp_path: Path) -> None:
    # GIVEN a 4-rank run where rank 2 computes 8 ms longer per slot and its GPU 2 throttles thermally
    run = _run_dir(tmp_path, {2: 8000.0}, throttle_gpu=2)
    # WHEN the run is analyzed end to end
    result = analyzed(run, tmp_path / "out", cache=False, workers=1)
    findings = result.findings
    straggler = next(f for f in findings if f.analyzer == "straggler" and f.ranks == (2,))
    gpu = next(f for f in findings if f.analyzer == "gpu_health")
    # THEN the straggler carries the chain, its summary names the GPU, the throttle share and the clocks
    root = straggler.evidence["root_cause"]
    assert root["location"]["gpu"] == 2 and root["location"]["nics"] == ["mlx5_2/1"]
    assert [c["id"] for c in root["chain"]] == [gpu.id] and root["chain"][0]["explains"]
    assert root["summary"].startswith("rank 2 late in 100% of steps; its GPU 2 on host node-a was in thermal "
                                      "slowdown 40% of the time; SM clock 1410 MHz while throttled against a job "
                                      "median of 1980")
    assert straggler.recommendation.startswith("Likely cause: its GPU 2")
    # AND the GPU finding points back, names rank 2 and costs what the straggler costs
    assert straggler.id in gpu.related and gpu.id in straggler.related
    assert gpu.ranks == (2,) and gpu.cost == straggler.cost and gpu.cost.seconds_per_step > 0.02
    # AND the two are ranked next to each other by that cost, the healthy NICs and other GPUs give no warnings
    ids = [f.id for f in findings]
    assert abs(ids.index(straggler.id) - ids.index(gpu.id)) == 1
    assert all(f.cost.seconds_per_step >= gpu.cost.seconds_per_step for f in findings[:ids.index(gpu.id)])
    assert [f.title for f in findings if f.analyzer in MINE and f.severity >= Severity.WARNING] == [gpu.title]
    html = result.report_path.read_text()
    assert "Root causes of stragglers" in html and "GPUs on host node-a" in html and "RDMA on host node-a" in html


def test_a_throttle_outside_the_late_steps_is_only_also_seen(tmp_path: Path) -> None:
    # GIVEN the same straggler, but its GPU throttled a day before the traced steps
    run = _run_dir(tmp_path, {2: 8000.0}, throttle_gpu=2, samples_shift_s=-86_400)
    # WHEN analyzed
    findings = analyzed(run, tmp_path / "out", cache=False, workers=1).findings
    straggler = next(f for f in findings if f.analyzer == "straggler" and f.ranks == (2,))
    gpu = next(f for f in findings if f.analyzer == "gpu_health")
    # THEN the throttle is listed as also seen, with when, and neither explains nor takes the straggler's cost
    (link,) = straggler.evidence["root_cause"]["chain"]
    assert link["relation"] == "also seen on that host" and not link["explains"] and "not while" in link["why"]
    assert gpu.cost.seconds_per_step == 0 and not straggler.recommendation.startswith("Likely cause")
    assert straggler.evidence["root_cause"]["locus"] == "gpu"


def test_a_gpu_signal_does_not_explain_a_cpu_side_straggler(tmp_path: Path) -> None:
    # GIVEN a real CPU-only trace job (rank 2 does extra CPU work) beside samples of a throttled GPU 2
    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sample / "traces", run / "traces")
    shutil.copytree(sample / "env", run / "env")
    shutil.copytree(sample / "steps", run / "steps")  # its 5x forward phase names rank 2 (5 traced steps alone do not)
    ranks = __import__("perftracker.collectors.loading", fromlist=["load_path"]).load_path(
        run, LoadOptions(workers=1, cache_dir=None)).ranks
    start = int(ranks["base_ns"].max())
    recs = [gpu_record("vm", g, start + i * 10**8, sm_clock_mhz=1410 if g == 2 else 1980,
                       clock_event_reasons=0x40 if g == 2 else 0) for i in range(40) for g in range(4)]
    write_jsonl(run / "counters" / "vm.gpu.jsonl", recs)
    # WHEN analyzed
    findings = analyzed(run, tmp_path / "out", cache=False, workers=1).findings
    # THEN rank 2 is named, and no straggler is explained by the GPU: its extra time is on the CPU
    joined = [f for f in findings if "root_cause" in f.evidence]
    assert joined and all(f.ranks == (2,) for f in joined)
    for s in joined:
        root = s.evidence["root_cause"]
        assert root["locus"] == "cpu" and not any(c["explains"] for c in root["chain"])
        assert not s.recommendation.startswith("Likely cause")
    assert all(f.cost.seconds_per_step == 0 for f in findings if f.analyzer == "gpu_health")


def test_healthy_samples_and_no_straggler_give_no_host_warnings(tmp_path: Path) -> None:
    # GIVEN the same run without a straggler and with healthy GPUs and NICs
    run = _run_dir(tmp_path, {}, throttle_gpu=None)
    findings = analyzed(run, tmp_path / "out", cache=False, workers=1).findings
    # THEN the host analyzers raise nothing above info, and the topology map covers every rank
    assert [f.title for f in findings if f.analyzer in MINE and f.severity >= Severity.WARNING] == []
    topo = next(f for f in findings if f.analyzer == "topology")
    assert [(e["rank"], e["gpu"], e["nics"]) for e in topo.evidence["ranks"]] == [
        (r, r, [f"mlx5_{r}/1"]) for r in range(4)]


def test_communication_straggler_is_linked_to_its_flapping_nic() -> None:
    # GIVEN node exporter samples of node-c (mlx5_1 flapping) and rank 1 on node-c using mlx5_1
    tables, _, _ = load_counter_inputs([FIXTURES / "node-c.node_exporter.prom"])
    store = Store()
    for name, frame in tables.items():
        store.set_table(name, frame)
    store.set_table("config", conform("config", pd.DataFrame([
        {"rank": r, "host": "node-c", "pid": r, "key": k, "value": v, "source": "env", "evidence": ""}
        for r in (0, 1) for k, v in (("LOCAL_RANK", str(r)), ("NCCL_IB_HCA", f"mlx5_{r}"))])))
    straggler = Finding(analyzer="straggler", severity=Severity.WARNING, title="Rank 1 is a persistent communication "
                        "straggler", recommendation="Check its NIC.", evidence={"kind": "communication",
                                                                               "share_last": 0.9},
                        ranks=(1,), cost=Cost(0.02, 0.1), key="straggler:1")
    rdma = analyze_rdma(Analysis(store))
    # WHEN linked
    linked = rank_findings(link_findings(Analysis(store), [straggler, *rdma]))
    # THEN the flap on mlx5_1 is the chain, costs the straggler's time and is ranked next to it
    s = next(f for f in linked if f.analyzer == "straggler")
    flap = next(f for f in linked if f.evidence.get("check") == "flap")
    assert [c["id"] for c in s.evidence["root_cause"]["chain"]] == [flap.id]
    assert flap.evidence["device"] == "mlx5_1" and flap.cost == s.cost and flap.ranks == (1,)
    assert {linked[0].id, linked[1].id} == {s.id, flap.id}
    assert rank_map(store).set_index("rank").loc[1, "nic_source"] == "NCCL_IB_HCA"


def test_bandwidth_uses_ring_factors(tmp_path: Path) -> None:
    # GIVEN synthetic NCCL collectives over 4 ranks
    generate(SynthSpec(ranks=4, steps=3, kernels_per_step=8), tmp_path / "t", truth_path=tmp_path / "truth.json")
    from perftracker.collectors.loading import load_path

    store = load_path(tmp_path / "t", LoadOptions(workers=1))
    table = collective_bandwidth(store)
    # THEN bus bandwidth is algorithm bandwidth times the ring factor of each collective
    assert bus_factor("all_reduce", 4) == 1.5 and bus_factor("_allgather_base", 4) == 0.75
    assert bus_factor("broadcast", 4) == 1.0
    row = table[table["collective"] == "all_reduce"].iloc[0]
    assert abs(row["busbw_gbs"] - 1.5 * row["algbw_gbs"]) < 1e-9 and row["algbw_gbs"] > 0


def test_sampled_stack_straggler_and_other_findings_about_its_rank_name_each_other() -> None:
    # GIVEN a stack_profile finding on rank 2, a trace straggler on rank 2 and a hang naming rank 1
    sampled = Finding("stack_profile", Severity.WARNING, "Rank 2 spends 34% of its time in f", "r", {}, ranks=(2,),
                      key="sp")
    trace = Finding("straggler", Severity.CRITICAL, "Rank 2 is a straggler", "r", {"kind": "compute"}, ranks=(2,),
                    cost=Cost(0.01, 0.2), key="st")
    hang = Finding("hang", Severity.CRITICAL, "Rank 1 is not in the collective", "r", {}, ranks=(1,), key="h")
    # WHEN findings are linked
    out = {f.analyzer: f for f in link_findings(Analysis(Store()), [sampled, trace, hang])}
    # THEN the two about rank 2 name each other and the hang about rank 1 stays apart
    assert trace.id in out["stack_profile"].related and sampled.id in out["straggler"].related
    assert out["hang"].related == ()
