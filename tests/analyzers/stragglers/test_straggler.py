"""Straggler detection: exact ground truth from the synthetic generator, and the real 2-rank GPU traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import SynthSpec, generate, tp_dp_groups

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.stragglers.collectives import aligned_arrivals
from perftracker.collectors.loading import LoadOptions, load_path


def stragglers(store) -> list:  # type: ignore[no-untyped-def]
    return [f for f in costed_findings(Analysis(store)) if f.analyzer == "straggler" and f.severity >= Severity.WARNING]


def build(tmp_path: Path, spec: SynthSpec):  # type: ignore[no-untyped-def]
    truth = generate(spec, tmp_path / "traces", truth_path=tmp_path / "truth.json")
    return load_path(tmp_path / "traces", LoadOptions(workers=1)), truth


def test_seeded_compute_straggler_and_clock_skews_are_recovered(tmp_path: Path) -> None:
    # GIVEN 16 ranks with random clock skews (up to 5 ms) and rank 5 doing 2 ms more work per collective
    store, truth = build(tmp_path, SynthSpec(ranks=16, stragglers={5: 2000.0}, seed=1))
    # WHEN analyzed
    found = stragglers(store)
    # THEN exactly rank 5 is named, as a compute straggler, with the cost the simulation says
    assert [f.ranks for f in found] == [(5,)]
    assert found[0].evidence["kind"] == "compute"
    expected = truth.stragglers[5].simulated_cost_us_per_step / 1e6
    assert found[0].cost.seconds_per_step == pytest.approx(expected, rel=0.05)
    # and every rank's clock offset is recovered (relative to the job's median clock)
    offsets = aligned_arrivals(store)[1].offsets
    true = {int(r): float(v) for r, v in truth.skew_us.items()}
    recovered = {int(r): float(v) / 1e3 for r, v in offsets.items()}
    shift = sorted(true[r] - recovered[r] for r in recovered)[len(recovered) // 2]
    for rank, off in recovered.items():
        assert abs(off + shift - true[rank]) < 30  # microseconds


def test_tensor_and_data_parallel_groups_name_the_cause_not_its_partner(tmp_path: Path) -> None:
    # GIVEN TP groups of 2 inside DP groups; rank 7 is slow, so its TP partner 6 also reaches DP late
    store, _ = build(tmp_path, SynthSpec(ranks=16, groups=tp_dp_groups(16, 2), stragglers={7: 1500.0}, seed=2))
    assert [f.ranks for f in stragglers(store)] == [(7,)]


def test_communication_straggler_is_told_apart_across_groups(tmp_path: Path) -> None:
    store, _ = build(tmp_path, SynthSpec(ranks=16, groups=tp_dp_groups(16, 2), comm_stragglers={11: 1500.0}, seed=4))
    found = stragglers(store)
    assert [f.ranks for f in found] == [(11,)]
    assert found[0].evidence["kind"] == "communication"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_straggler_no_finding(tmp_path: Path, seed: int) -> None:
    store, _ = build(tmp_path, SynthSpec(ranks=16, groups=tp_dp_groups(16, 2) if seed else None, seed=seed))
    assert stragglers(store) == []


def test_missing_rank_and_different_windows_are_tolerated(tmp_path: Path) -> None:
    store, _ = build(tmp_path, SynthSpec(ranks=8, stragglers={3: 2000.0}, missing_ranks={6}, seed=5))
    assert [f.ranks for f in stragglers(store)] == [(3,)]


def test_real_two_rank_gpu_traces_match_collectives_and_estimate_skew(hta_traces: Path, tmp_path: Path) -> None:
    # GIVEN ranks 0 and 1 of a real 128-rank NCCL job (no known straggler)
    store = load_path(hta_traces / "trace_filter", LoadOptions(workers=1))
    arr, domains = aligned_arrivals(store)
    offsets = domains.offsets
    # THEN the 10 NCCL kernels each rank ran in the 2 profiled steps are matched pairwise,
    assert arr["instance"].nunique() == 10 and len(arr) == 20
    # and the clocks of the two ranks (same job, synchronized hosts) differ by well under a millisecond
    assert 0 < int(offsets.max() - offsets.min()) < 1_000_000
