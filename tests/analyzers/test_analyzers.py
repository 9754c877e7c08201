"""Analyzers on traces with exactly known timings (microseconds in, findings out)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity, rank_findings
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.registry import Analyzer
from perftracker.analyzers.traces.gpu_time import breakdown
from perftracker.analyzers.traces.idle import idle_gaps
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store


def _load(tmp_path: Path, *builders: TraceBuilder) -> Store:
    for i, b in enumerate(builders):
        b.write(tmp_path / "t" / f"rank-{i}.json")
    return load_path(tmp_path / "t", LoadOptions(workers=1))


def test_breakdown_and_overlap_on_known_intervals(tmp_path: Path) -> None:
    # GIVEN one step of 1000 us: compute 0-400, NCCL 300-600 (100 us under compute), memcpy 700-750
    b = (TraceBuilder(rank=0).step(1, 0, 1000)
         .kernel("gemm", 0, 400).kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 300, 300, stream=20)
         .kernel("Memcpy DtoH", 700, 50, cat="gpu_memcpy"))
    store = _load(tmp_path, b)
    row = breakdown(store).iloc[0]
    # THEN span 750, compute 400, comm 300 of which 100 overlapped, memory 50, idle 100
    assert row["span_ns"] == 750_000
    assert row["compute_ns"] == 400_000
    assert row["comm_ns"] == 300_000 and row["comm_overlapped_ns"] == 100_000 and row["comm_exposed_ns"] == 200_000
    assert row["memory_exposed_ns"] == 50_000
    assert row["idle_ns"] == 100_000
    assert row["overlap_pct"] == pytest.approx(100 / 3)


def _exposed_steps(rank: int, world_size: int) -> TraceBuilder:
    """Two steps where communication runs alone for 40% of each step."""
    b = TraceBuilder(rank=rank, world_size=world_size)
    for n, t0 in ((1, 0), (2, 1000)):
        b.step(n, t0, 1000).kernel("gemm", t0 + 10, 580, launch_ts=t0 + 1).kernel(
            "ncclDevKernel_AllReduce_Sum_f32", t0 + 590, 400, launch_ts=t0 + 2, stream=20)
    return b


def test_exposed_communication_is_a_ranked_finding(tmp_path: Path) -> None:
    # GIVEN the trace of a one-rank job with two steps where communication runs alone for 40% of each step
    store = _load(tmp_path, _exposed_steps(rank=0, world_size=1))
    findings = [f for f in costed_findings(Analysis(store)) if f.analyzer == "overlap"]
    # THEN one critical overlap finding costing ~0.4 ms per step
    assert len(findings) == 1
    assert findings[0].severity == Severity.CRITICAL
    assert findings[0].cost.seconds_per_step == pytest.approx(400e-6, rel=0.01)
    assert "bucket_cap_mb" in findings[0].recommendation


def test_exposed_communication_of_one_rank_of_many_says_it_may_be_waiting(tmp_path: Path) -> None:
    # GIVEN the same steps, but the trace of rank 0 of an 8-rank job and no other rank's trace
    store = _load(tmp_path, _exposed_steps(rank=0, world_size=8))
    findings = [f for f in costed_findings(Analysis(store)) if f.analyzer == "overlap"]
    # THEN the finding is a warning at most: the kernel time may be waiting for a late rank, which one trace cannot
    # tell apart, and the advice starts with profiling every rank
    assert len(findings) == 1 and findings[0].severity == Severity.WARNING
    assert "1 of 8 ranks profiled" in findings[0].title
    assert findings[0].recommendation.startswith("First profile every rank")
    assert findings[0].evidence["waiting_told_apart"] is False


def test_idle_gaps_are_attributed_to_launch_sync_and_step_boundary(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0).step(1, 0, 500).step(2, 500, 500)
    b.kernel("k1", 10, 100, launch_ts=5)
    b.kernel("k2", 130, 100, launch_ts=125)  # launched 20 us after k1 ended: launch-bound gap 110-130
    b.cpu("cudaDeviceSynchronize", 240, 150, cat="cuda_runtime")  # CPU blocked until 390
    b.kernel("k3", 400, 50, launch_ts=395)  # GPU idle 230-400: waited on the synchronization
    b.kernel("k4", 600, 50, launch_ts=595)  # next step: idle 450-600 between steps
    b.kernel("k5", 700, 50, launch_ts=640)  # launched before the GPU went idle (650): dependency
    store = _load(tmp_path, b)
    gaps = idle_gaps(store).sort_values("start_ns")
    assert list(gaps["category"]) == ["launch", "sync", "between_steps", "dependency"]
    assert list(gaps["dur_ns"]) == [20_000, 170_000, 150_000, 50_000]


def test_phase_imbalance_names_the_slow_rank(tmp_path: Path) -> None:
    # GIVEN step files where rank 2's forward takes 3x its peers' and step times are equal
    import json

    steps = tmp_path / "run" / "steps"
    steps.mkdir(parents=True)
    for rank in range(4):
        with open(steps / f"rank-{rank}.jsonl", "w") as fh:
            for step in range(10):
                fwd = 30_000_000 if rank == 2 else 10_000_000
                fh.write(json.dumps({"rank": rank, "step": step, "start_ns": step * 100_000_000,
                                     "end_ns": step * 100_000_000 + 90_000_000, "host": f"h{rank}",
                                     "phases_ns": {"forward": fwd, "backward": 50_000_000}}) + "\n")
    store = load_path(tmp_path / "run", LoadOptions(workers=1))
    findings = [f for f in costed_findings(Analysis(store)) if f.analyzer == "steps" and f.severity >= Severity.WARNING]
    assert len(findings) == 1 and findings[0].ranks == (2,) and findings[0].hosts == ("h2",)
    assert "forward" in findings[0].title


def test_a_crashing_analyzer_becomes_a_finding(tmp_path: Path) -> None:
    # GIVEN an extra analyzer that raises
    def crasher(analysis: Analysis) -> list[Finding]:
        raise ZeroDivisionError("boom")

    store = _load(tmp_path, TraceBuilder(rank=0).step(1, 0, 100).kernel("gemm", 1, 10))
    # WHEN every analyzer runs
    findings = costed_findings(Analysis(store), extra=(Analyzer("test_crasher", crasher, "raises on purpose"),))
    # THEN its failure is one finding and the others still ran
    crash = [f for f in findings if f.analyzer == "test_crasher"]
    assert len(crash) == 1 and "boom" in crash[0].title and crash[0].severity == Severity.WARNING
    assert any(f.analyzer == "breakdown" for f in findings)


def test_findings_are_ranked_by_severity_then_cost_then_confidence() -> None:
    from perftracker.analyzers.findings import Cost

    # GIVEN a costly warning, a cheap critical, an info and two equally costly warnings of different confidence
    cheap = Finding("a", Severity.CRITICAL, "cheap critical", "r", cost=Cost(0.001, 0.01))
    dear = Finding("b", Severity.WARNING, "dear warning", "r", cost=Cost(0.1, 0.3))
    info = Finding("c", Severity.INFO, "costly info", "r", cost=Cost(0.5, 0.9))
    sure = Finding("d", Severity.WARNING, "sure", "r", cost=Cost(0.01, 0.1), confidence=0.999)
    unsure = Finding("e", Severity.WARNING, "unsure", "r", cost=Cost(0.01, 0.1), confidence=0.6)
    # WHEN ranked; THEN severity leads, then cost, then confidence
    assert [f.title for f in rank_findings([info, unsure, dear, cheap, sure])] == [
        "cheap critical", "dear warning", "sure", "unsure", "costly info"]
