"""The evidence of the trace findings: the time breakdown, idle GPU time, overlap, efficiency, the inputs
read, and the sanity and diff verdicts.
Each type lists its keys several to a line, as a table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.units import Gbps, GBs, Json, Ms, MsPerStep, Pct, Share, Us

BreakdownEvidence = TypedDict("BreakdownEvidence", {
    "comm_libraries": dict[str, Json], "measured_over": str,
    "memory_exposed_ms_per_step": dict[str, MsPerStep], "per_rank": dict[str, Json],
    "positions": list[str], "ranks": Json,
}, total=False)

IdleEvidence = TypedDict("IdleEvidence", {
    "cpu_ops_during_gaps": list[Json], "cpu_ops_while_idle": list[Json], "longest_gaps": list[Json],
    "measured_over": str, "next_kernel": str, "per_rank": dict[str, Json], "tiny_kernels": list[Json],
}, total=False)

OverlapEvidence = TypedDict("OverlapEvidence", {
    "measured_over": str, "per_rank": dict[str, Json], "positions": list[str], "ranks_profiled": int,
    "waiting_told_apart": bool, "world_size": int,
}, total=False)

EfficiencyEvidence = TypedDict("EfficiencyEvidence", {
    "alignment_elements": int, "chains": int, "device": str, "device_dense_peaks_tflops": dict[str, Json],
    "device_names": list[str], "first_line": str, "fp32_gemms": int, "fp32_tflops": float,
    "instances": int, "kernels": int, "lines": int, "longest_chain": int, "mean_gpu_us": Us,
    "perftracker_tflops_per_gpu_median": float | None, "positions": list[str], "ranks": list[int],
    "reference": str, "reference_pct_of_roof": Pct, "reference_tflops": float,
    "reported_mfu_pct_median": Pct | None, "reported_tflops_per_gpu_median": float, "saved_ms_total": Ms,
    "saved_ms_total_upper_bound": Ms, "shapes": list[Json], "source": str, "top_shapes": list[Json],
}, total=False)

InputsEvidence = TypedDict("InputsEvidence", {
    "counter_ranges": int, "error_files": list[str], "events": int, "file": str, "files": Json,
    "fr": list[str], "gpu_ms": Ms, "info": bool, "kernel_launches": int, "logs": list[str], "matched": int,
    "notes": list[str], "nsys": bool, "operators": int, "present": list[int], "rank": int | None,
    "runtime_calls": int, "synthetic_inputs": list[Json], "until_ms": Ms, "world_size": int,
}, total=False)

SanityEvidence = TypedDict("SanityEvidence", {
    "best_gbps": Gbps, "cpu_quota_cgroup": str, "cpu_quota_cores": float, "cut": list[str],
    "figures": list[Json], "likely_cause": str, "machine_cpu_pressure": float, "nic_link_gbs": GBs,
    "nic_rate_mbps": int, "pair_count": int, "pairs": list[Json], "peer_cpu_quotas": list[Json],
    "peer_link_gbs": GBs, "peer_median_gbps": Gbps, "peer_rate_mbps": int, "ranks": list[int],
    "shaping": dict[str, Json], "throttled_share": Share,
}, total=False)

DiffEvidence = TypedDict("DiffEvidence", {
    "base_comm_ms": Ms, "base_compute_ms": Ms, "base_step_ms": Ms, "base_steps": int,
    "excess_ms_per_step": MsPerStep, "explained_ms_per_step": MsPerStep, "new": list[str],
    "new_comm_ms": Ms, "new_compute_ms": Ms, "new_step_ms": Ms | None, "new_steps": int, "ops": list[Json],
    "p_faster": float, "p_slower": float, "peers_excess_ms": dict[str, Ms], "rank": int,
    "resolved": list[str], "settings": list[Json], "tolerance": float, "top_op": str, "top_op_base_ms": Ms,
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
