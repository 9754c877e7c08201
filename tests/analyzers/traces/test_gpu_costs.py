"""GPU costs measured over the right periods: the GPU's clock when it runs behind, inferred iterations or the
whole window without ProfilerStep markers, CUDA-graph replays, and communication of every library (MoE
expert-parallel kernels with known overlap). Traces with exactly known timings (microseconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracegen import TraceBuilder

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.traces.idle import idle_gaps
from perftracker.analyzers.traces.intervals import covered_within, intersect, union
from perftracker.analyzers.traces.period_costs import QUANTITIES, period_costs_view
from perftracker.analyzers.traces.periods import cost_periods_view
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

# real kernel names (tests/collectors/traces/test_comm_kernels.py says where each comes from)
DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*)"
COMBINE = "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)"
GROUPED_GEMM = ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>("
                "dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel::Params)")
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _load(tmp_path: Path, builder: TraceBuilder) -> Store:
    builder.write(tmp_path / "t" / "rank-0.json")
    return load_path(tmp_path / "t", LoadOptions(workers=1))


def _findings(store: Store, analyzer: str) -> list[Finding]:
    return [f for f in costed_findings(Analysis(store), only=[analyzer]) if f.analyzer == analyzer]


def test_gpu_running_behind_the_cpu_measures_steps_on_the_gpus_clock(tmp_path: Path) -> None:
    # GIVEN 3 steps the CPU queues in 600 us each while the GPU needs 1000 us per step, 700 us of it
    # communication alone (on the CPU's step time that would be 117% of the step)
    b = TraceBuilder(rank=0)
    for n in range(3):
        b.step(n + 1, 600 * n, 600)
        b.kernel("sm80_xmma_gemm_f16f16_f16f32", 1000 * n + 50, 200, launch_ts=600 * n + 10)
        b.kernel(ALLREDUCE, 1000 * n + 250, 700, launch_ts=600 * n + 20, stream=20)
    store = _load(tmp_path, b)
    analysis = Analysis(store)
    # WHEN the periods and the overlap finding are computed
    periods = analysis.view(cost_periods_view)
    [finding] = _findings(store, "overlap")
    # THEN each step runs from its first kernel to the next step's, and the share stays under 100%
    assert list(periods["clock"]) == ["gpu"] * 3
    assert list(periods["start_ns"]) == [50_000, 1_050_000, 2_050_000]
    assert list(periods["end_ns"]) == [1_050_000, 2_050_000, 2_950_000]
    assert finding.cost.seconds_per_step == pytest.approx(700e-6)
    assert finding.cost.share_of_step == pytest.approx(2100 / 2900)
    assert "per step (72% of the step)" in finding.title
    assert "GPU's clock" in finding.evidence["measured_over"]


def test_without_profiler_steps_a_repeating_annotation_gives_iterations(tmp_path: Path) -> None:
    # GIVEN no ProfilerStep markers, an optimizer step annotation every 1000 us, and one 100 us kernel per
    # iteration launched 900 us after the previous one ended while the CPU copies data (aten::to)
    b = TraceBuilder(rank=0)
    for k in range(4):
        b.cpu("Optimizer.step#AdamW.step", 1000 * k, 50, cat="user_annotation")
        b.cpu("aten::to", 1000 * k + 300, 500)
        b.kernel("sm80_xmma_gemm_f16f16_f16f32", 1000 * k + 100, 100, launch_ts=1000 * k + 95)
    store = _load(tmp_path, b)
    # WHEN the idle analyzer runs
    periods = Analysis(store).view(cost_periods_view)
    [host] = [f for f in _findings(store, "idle") if f.key == "idle:host"]
    # THEN it measures over the 3 iterations between the annotation's starts, and says so
    assert list(periods["basis"]) == ["iterations"] * 3 and set(periods["marker"]) == {"Optimizer.step#AdamW.step"}
    assert host.severity == Severity.WARNING
    assert host.cost.seconds_per_step == pytest.approx(2600e-6 / 3)
    assert host.cost.share_of_step == pytest.approx(2600 / 3000)
    assert host.title.startswith("The GPU waits 867 us per iteration for the CPU")
    assert "(87% of the iteration)" in host.title and host.title.endswith("ran aten::to (56% of that time)")
    assert "Optimizer.step#AdamW.step" in host.evidence["measured_over"]
    assert host.evidence["cpu_ops_during_gaps"][0]["op"] == "aten::to"


def test_without_steps_or_markers_the_whole_window_is_judged(tmp_path: Path) -> None:
    # GIVEN two kernels 900 us apart, the second launched late while the CPU ran a long copy
    b = (TraceBuilder(rank=0).kernel("k_first", 0, 50, launch_ts=-5).cpu("aten::copy_", 100, 800)
         .kernel("k_second", 950, 50, launch_ts=940))
    store = _load(tmp_path, b)
    # WHEN the idle analyzer runs
    [host] = [f for f in _findings(store, "idle") if f.key == "idle:host"]
    # THEN a 90% idle GPU is a warning over the profiled window, naming the CPU op of the gap
    assert host.severity == Severity.WARNING
    assert host.cost.share_of_step == pytest.approx(0.9)
    assert host.title.startswith("The GPU waits 900 us over the profiled window for the CPU")
    assert "(90% of the window)" in host.title and host.title.endswith("ran aten::copy_ (89% of that time)")
    assert "whole profiled window" in host.evidence["measured_over"]
    assert host.evidence["cpu_ops_during_gaps"][0] == {"op": "aten::copy_", "ms": 0.8, "share_pct": 88.9, "count": 1}


def test_cuda_graph_replays_belong_to_the_step_that_launched_them(tmp_path: Path) -> None:
    # GIVEN step 1 launching one CUDA graph of three kernels that run until 900 us, and step 2 one kernel
    b = TraceBuilder(rank=0).step(1, 0, 300).step(2, 300, 300)
    b.graph([("graph_k1", 20, 100), ("graph_k2", 130, 100), ("graph_k3", 240, 660)], launch_ts=10)
    b.kernel("after_graph", 900, 100, launch_ts=310)
    store = _load(tmp_path, b)
    # WHEN the steps, periods and idle gaps are computed
    kernels = store.events[store.events["stream"] >= 0].set_index(store.events.loc[store.events["stream"] >= 0, "name"]
                                                                    .astype(str))
    periods = Analysis(store).view(cost_periods_view)
    gaps = idle_gaps(store)
    # THEN the replayed kernels are step 1's, the steps are on the GPU's clock, and the gaps inside the
    # replay are dependencies (the work was queued), not launch delays
    assert {kernels.loc[k, "step"] for k in ("graph_k1", "graph_k2", "graph_k3")} == {1}
    assert kernels.loc["after_graph", "step"] == 2
    assert list(periods["clock"]) == ["gpu", "gpu"]
    assert list(periods["start_ns"]) == [20_000, 900_000]
    assert set(gaps["category"]) == {"dependency"}


def test_moe_expert_parallel_communication_is_recognised_and_its_overlap_known(tmp_path: Path) -> None:
    # GIVEN 2 steps of 1000 us: a grouped GEMM 0-600, DeepEP dispatch 100-300 (hidden), combine 500-800
    # (100 us hidden), an NCCL all-reduce 850-950 (exposed), no flag naming any of them
    b = TraceBuilder(rank=0)
    for n in range(2):
        t0 = 1000 * n
        b.step(n + 1, t0, 1000).kernel(GROUPED_GEMM, t0, 600, launch_ts=t0 - 4)
        b.kernel(DISPATCH, t0 + 100, 200, launch_ts=t0 + 1, stream=20)
        b.kernel(COMBINE, t0 + 500, 300, launch_ts=t0 + 2, stream=20)
        b.kernel(ALLREDUCE, t0 + 850, 100, launch_ts=t0 + 3, stream=21)
    store = _load(tmp_path, b)
    # WHEN the breakdown and overlap analyzers run
    [summary] = _findings(store, "breakdown")
    [overlap] = _findings(store, "overlap")
    # THEN all communication and the expert-parallel part are reported with what is hidden
    rank0 = summary.evidence["per_rank"][0]
    assert rank0["comm_ms_per_step"] == 0.6 and rank0["comm_hidden_pct"] == 50.0
    assert rank0["expert_parallel_ms_per_step"] == 0.5 and rank0["expert_parallel_hidden_pct"] == 60.0
    assert rank0["by_library"] == {"deepep": {"ms_per_step": 0.5, "hidden_pct": 60.0},
                                   "nccl": {"ms_per_step": 0.1, "hidden_pct": 0.0}}
    assert "expert-parallel: 500 us per step, 60% hidden" in summary.title
    assert store.run_info.comm_libraries["deepep"]["expert_parallel"] is True
    assert overlap.cost.seconds_per_step == pytest.approx(300e-6)
    assert overlap.cost.share_of_step == pytest.approx(0.3)


def test_period_costs_add_up_to_the_period(tmp_path: Path) -> None:
    # GIVEN kernels, communication and copies overlapping in every way across two steps
    b = TraceBuilder(rank=0).step(1, 0, 500).step(2, 500, 500)
    b.kernel("gemm", 10, 300, launch_ts=5).kernel(ALLREDUCE, 200, 250, launch_ts=6, stream=20)
    b.kernel("Memcpy HtoD", 420, 200, launch_ts=7, cat="gpu_memcpy", stream=30)
    b.kernel(COMBINE, 700, 100, launch_ts=510, stream=20).kernel("gemm", 750, 200, launch_ts=511)
    costs = Analysis(_load(tmp_path, b)).view(period_costs_view)
    # THEN compute, exposed communication, exposed copies and idle add up to each period, exactly
    assert len(costs) == 2
    parts = (costs["compute_ns"] + costs["comm_exposed_ns"] + costs["wait_exposed_ns"] + costs["memory_exposed_ns"]
             + costs["idle_ns"])
    assert list(parts) == list(costs["dur_ns"])
    assert (costs[list(QUANTITIES)] >= 0).all().all()
    assert list(costs["comm_ns"]) == [250_000, 100_000]
    assert list(costs["comm_hidden_ns"]) == [110_000, 50_000]


def test_interval_helpers_agree_with_a_bitmap() -> None:
    # GIVEN 200 random pairs of interval sets on a 0..200 ns line (seeded), and random windows
    rng = np.random.default_rng(13)
    for _ in range(200):
        sets = []
        for _ in range(2):
            s = np.sort(rng.integers(0, 180, 8))
            sets.append(union(s, s + rng.integers(1, 20, 8)))
        bitmaps = [np.zeros(220, dtype=bool) for _ in sets]
        for bitmap, (s, e) in zip(bitmaps, sets):
            for lo, hi in zip(s, e):
                bitmap[lo:hi] = True
        lo = rng.integers(0, 200, 6)
        hi = lo + rng.integers(0, 40, 6)
        # WHEN intersected and measured inside the windows THEN the lengths are those of the bitmaps
        i_s, i_e = intersect(*sets[0], *sets[1])
        assert int((i_e - i_s).sum()) == int((bitmaps[0] & bitmaps[1]).sum())
        assert list(covered_within(*sets[0], lo, hi)) == [int(bitmaps[0][a:b].sum()) for a, b in zip(lo, hi)]
