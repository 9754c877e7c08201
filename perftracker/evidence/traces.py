"""The evidence of the trace findings: the time breakdown, idle GPU time, overlap, efficiency, the inputs
read, and the sanity and diff verdicts.
Each type lists its keys several to a line, as a table; a `...Row` type is one row of a sub-table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.units import GBs, Json, Mbps, Ms, MsPerStep, Pct, Share, Tflops, Us

# breakdown: one rank's GPU time by use (and per communication library, `by_library`)
LibraryRow = TypedDict("LibraryRow", {"ms_per_step": MsPerStep, "hidden_pct": Pct})
BreakdownRow = TypedDict("BreakdownRow", {
    "compute_pct": Pct, "comm_exposed_pct": Pct, "wait_exposed_pct": Pct, "memory_exposed_pct": Pct, "idle_pct": Pct,
    "comm_pct": Pct, "comm_ms_per_step": MsPerStep, "comm_hidden_pct": Pct, "expert_parallel_ms_per_step": MsPerStep,
    "expert_parallel_hidden_pct": Pct, "by_library": dict[str, LibraryRow],
}, total=False)
BreakdownEvidence = TypedDict("BreakdownEvidence", {
    "comm_libraries": dict[str, str], "measured_over": str, "memory_exposed_ms_per_step": dict[int, MsPerStep],
    "per_rank": dict[int, BreakdownRow], "ranks": str | list[int],
}, total=False)

# idle: one rank's idle time; the CPU ops in the gaps; the longest gaps; the tiny kernels launch-bound gaps precede
IdleRow = TypedDict("IdleRow", {"idle_ms_per_step": MsPerStep, "gaps": int, "median_gap_us": Us})
CpuOpRow = TypedDict("CpuOpRow", {"op": str, "ms": Ms, "share_pct": Pct, "count": int, "input_shapes": str},
                     total=False)
IdleOpRow = TypedDict("IdleOpRow", {"op": str, "kind": str, "ms_per_step": MsPerStep, "share_of_idle_pct": Pct})
GapRow = TypedDict("GapRow", {"rank": int, "step": int, "gap_ms": Ms, "cpu_ops": str, "next_kernel": str,
                              "launched_by": str})
TinyKernelRow = TypedDict("TinyKernelRow", {"kernel": str, "launched_by": str, "gaps_before": int,
                                            "idle_before_ms_per_step": MsPerStep, "kernel_median_us": Us})
IdleEvidence = TypedDict("IdleEvidence", {
    "per_rank": dict[int, IdleRow], "measured_over": str, "cpu_ops_during_gaps": list[CpuOpRow],
    "cpu_ops_while_idle": list[IdleOpRow], "longest_gaps": list[GapRow], "tiny_kernels": list[TinyKernelRow],
}, total=False)

OverlapRow = TypedDict("OverlapRow", {"overlap_pct": Pct, "exposed_ms_per_step": MsPerStep,
                                      "waiting_for_late_ranks_ms_per_step": MsPerStep, "comm_ms_total": Ms})
OverlapEvidence = TypedDict("OverlapEvidence", {
    "measured_over": str, "per_rank": dict[int, OverlapRow],
    "ranks_profiled": int, "waiting_told_apart": bool, "world_size": int,
}, total=False)

# efficiency: one GEMM or attention shape (the columns its finding has)
ShapeRow = TypedDict("ShapeRow", {"op": str, "shape": str, "dtype": str, "count": int, "gpu_ms": Ms,
                                  "pct_of_roof": Pct}, total=False)
EfficiencyEvidence = TypedDict("EfficiencyEvidence", {
    "alignment_elements": int, "chains": int, "device": str, "device_dense_peaks_tflops": dict[str, Tflops],
    "device_names": list[str], "first_line": str, "fp32_gemms": int, "fp32_tflops": Tflops,
    "instances": int, "kernels": int, "lines": int, "longest_chain": int, "mean_gpu_us": Us,
    "perftracker_tflops_per_gpu_median": Tflops | None, "ranks": list[int],
    "reference": str, "reference_pct_of_roof": Pct, "reference_tflops": Tflops,
    "reported_mfu_pct_median": Pct | None, "reported_tflops_per_gpu_median": Tflops | None, "saved_ms_total": Ms,
    "saved_ms_total_upper_bound": Ms, "shapes": list[ShapeRow], "source": str, "top_shapes": list[ShapeRow],
}, total=False)

# inputs: the loaders' notes' data (an info note's, passed through) and what the inputs analyzer counts
InputsEvidence = TypedDict("InputsEvidence", {
    "counter_ranges": int, "error_files": list[str], "events": int, "file": str, "files": dict[str, str] | list[str],
    "fr": list[str], "gpu_ms": Ms, "info": bool, "kernel_launches": int, "logs": list[str], "matched": int,
    "notes": list[str], "nsys": bool, "operators": int, "present": list[int], "rank": int | None,
    "runtime_calls": int, "synthetic_inputs": list[dict[str, str]], "until_ms": Ms, "world_size": int,
}, total=False)

# sanity: one low figure of a device or node; one pair of nodes' ping-pong (as the check recorded it, in GB/s)
FigureRow = TypedDict("FigureRow", {
    "rank": int, "device": str, "figure": str, "value": float | None, "peer_median": float, "peer_mad": float,
    "own_spread": float, "repeats": list[float], "confidence": float, "note": str, "source": str,
}, total=False)
PairRow = TypedDict("PairRow", {"a": str, "b": str, "gbps": GBs | None, "rtt_ms": Ms | None, "error": str,
                                "cut": bool, "tours_gbps": list[GBs]}, total=False)
SanityEvidence = TypedDict("SanityEvidence", {
    "best_gbps": GBs, "cpu_quota_cgroup": str, "cpu_quota_cores": float, "cut": list[str],
    "errors": dict[str, list[str]], "figures": list[FigureRow], "likely_cause": str, "machine_cpu_pressure": Pct,
    "cgroup_cpu_pressure": Pct, "peer_cgroup_cpu_pressure": Pct, "nic_link_gbs": GBs | None, "nic_rate_mbps": Mbps,
    "pair": PairRow, "pair_count": int, "pairs": list[PairRow], "peer_cpu_quotas": list[float | None],
    "peer_link_gbs": GBs | None, "peer_median_gbps": GBs, "peer_rate_mbps": Mbps, "ranks": list[int],
    "shaping": dict[str, Json], "link_errors": dict[str, dict[str, int]], "throttled_share": Share | None,
}, total=False)

# diff: one op whose time changed; one setting that differs
DiffOpRow = TypedDict("DiffOpRow", {"name": str, "kind": str, "change": str, "base_ms_per_step": MsPerStep,
                                    "new_ms_per_step": MsPerStep, "extra_ms_per_step": MsPerStep})
SettingRow = TypedDict("SettingRow", {"key": str, "base": list[str], "new": list[str]})
DiffEvidence = TypedDict("DiffEvidence", {
    "base_comm_ms": Ms, "base_compute_ms": Ms, "base_step_ms": Ms | None, "base_steps": int,
    "excess_ms_per_step": MsPerStep, "explained_ms_per_step": MsPerStep, "new": list[str],
    "new_comm_ms": Ms, "new_compute_ms": Ms, "new_step_ms": Ms | None, "new_steps": int, "ops": list[DiffOpRow],
    "p_faster": float, "p_slower": float, "peers_excess_ms": dict[str, Ms], "rank": int,
    "resolved": list[str], "settings": list[SettingRow], "tolerance": float, "top_op": str, "top_op_base_ms": Ms,
    "top_op_new_ms": Ms, "uniform_scale": float,
}, total=False)


EVIDENCE = {
    "breakdown": BreakdownEvidence,
    "idle": IdleEvidence,
    "overlap": OverlapEvidence,
    "efficiency": EfficiencyEvidence,
    "inputs": InputsEvidence,
    "sanity": SanityEvidence,
    "diff": DiffEvidence,
}
