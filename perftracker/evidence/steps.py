"""The evidence of the step-time findings: stragglers, slow phases, degradation, stack profiles, expert
balance, what-if replays and pipeline schedules.
Each type lists its keys several to a line, as a table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.common import Significance
from perftracker.evidence.units import Json, Ms, MsPerStep, Ns, Pct, S, Share

StragglerEvidence = TypedDict("StragglerEvidence", {
    "before_arrival": dict[str, Json], "caused_rank_ms": Ms,
    "clock_domains": list[Json], "collective_events": int, "collectives": int, "cost_share_if_real": Share,
    "durations_test": dict[str, Json], "extra_transfer_ms": Ms, "extra_work_before_collective_ms": Ms,
    "fallback": str, "group": list[int], "host": str, "kind": str, "matched_collectives": int,
    "mean_wait_per_other_rank_ms": Ms, "median_lateness_ms": Ms, "next_rank_excess_ms": Ms,
    "offsets_ns": dict[str, Ns], "p90_lateness_ms": Ms, "peers_median_lateness_ms": Ms,
    "per_rank": dict[str, Json], "position": str, "positions": list[str], "share_last": Share,
    "significance": Significance, "skew_ns": Ns, "slower_ops": list[Json], "sources": list[str],
    "split_threshold_ms": Ms, "steps": int, "steps_mostly_last": float, "times_last": int,
    "transfer_excess_ms": Ms, "typical_transfer_ms": Ms, "victims": list[Json],
    "waited_for": dict[str, float], "waiting_ranks": list[int], "whole_host": bool,
}, total=False)

StepsEvidence = TypedDict("StepsEvidence", {
    "others_median_ms": Json, "peers_median_ms": Ms, "per_rank": dict[str, Json], "phase": str,
    "position": str, "positions": list[str], "rank_median_ms": Ms, "significance": Significance,
    "slow_step_extra_by_phase": dict[str, Json], "source": str,
}, total=False)

DegradationEvidence = TypedDict("DegradationEvidence", {
    "after_ms": Ms, "before_ms": Ms, "change_step": int, "extra_ms": Ms, "median_step_ms": Ms,
    "period_steps": int, "rise_by_rank_ms": dict[str, Ms], "significance": Significance,
    "spike_steps": list[int],
}, total=False)

StackProfileEvidence = TypedDict("StackProfileEvidence", {
    "deepest_frame": str, "excess": float, "frame": str, "median_share": Share, "method": str,
    "others_instead": str, "per_rank_share": dict[str, Share], "rank": int, "samples": int, "share": Share,
    "significance": Significance, "top_excess_frames": list[Json],
}, total=False)

ExpertBalanceEvidence = TypedDict("ExpertBalanceEvidence", {
    "alltoalls": int, "heavy_ranks": list[int], "imbalance_max": float, "imbalance_median": float,
    "received_rows": dict[str, int], "token_share": Share, "wait_caused_ms_per_step": MsPerStep,
    "wait_share_of_step": Share,
}, total=False)

WhatifEvidence = TypedDict("WhatifEvidence", {
    "M_S": float, "M_W": float, "S_stage": float, "fix_saves_s": S, "ideal_step_s": S, "job": str,
    "measured_step_s": S, "positions": list[str], "slowdown_S": float, "stage": int, "step_s": S,
    "steps": int, "top1_S_t": float, "top1_optype": str, "top2_S_t": float, "top2_optype": str,
    "top3_S_t": float, "top3_optype": str, "variation_share": Share, "verdict": str, "waste": float,
}, total=False)

PipelineEvidence = TypedDict("PipelineEvidence", {
    "balanced_step_ms": Ms, "bubble": float, "compute_per_microbatch_ms": list[Ms],
    "cooldown_wait_ms_by_stage": list[Ms], "excess_pct": Pct, "heavy_stage": int, "ideal_bubble": float,
    "layers_per_microbatch": float, "layout": str, "layout_confidence": float, "layout_method": str,
    "microbatches": int, "microbatches_to_hide": int, "move_layers": int, "move_to_stage": int,
    "p_family": float, "per_step_bubble": list[float], "pipeline_phase_ms": Ms, "positions": list[str],
    "recv_wait_ms_by_stage": list[Ms], "recv_wait_share_by_stage": list[Share], "replicas": int,
    "schedule": str, "simulated_saving_share_of_phase": Share, "stage_compute_share": list[Share],
    "stages": int, "step_ms": Ms, "steps": int, "test": str, "trials": int,
    "warmup_wait_ms_by_stage": list[Ms],
}, total=False)


EVIDENCE = {
    "straggler": StragglerEvidence,
    "steps": StepsEvidence,
    "degradation": DegradationEvidence,
    "stack_profile": StackProfileEvidence,
    "expert_balance": ExpertBalanceEvidence,
    "whatif": WhatifEvidence,
    "pipeline": PipelineEvidence,
}
