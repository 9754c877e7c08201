"""The evidence of the step-time findings: stragglers, slow phases, degradation, stack profiles, expert
balance, what-if replays and pipeline schedules, and the rows of their sub-tables.
Each type lists its keys several to a line, as a table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.common import Significance
from perftracker.evidence.units import Ms, MsPerStep, Ns, Pct, PerStep, S, Share

# The rows of the straggler's sub-tables: its slower ops (`op_work.slower_ops`), victims (`pipeline.views.seat_of`),
# a host name's clock domains, the paired durations test, what it ran before its late arrivals (`late_rank`).
SlowerOpRow = TypedDict("SlowerOpRow", {
    "name": str, "kind": str, "extra_ms_per_step": MsPerStep, "ms_per_step": MsPerStep,
    "peers_ms_per_step": MsPerStep, "count_per_step": PerStep, "p90_ms": Ms, "peers_p90_ms": Ms})
VictimRow = TypedDict("VictimRow", {
    "rank": int, "position": str, "role": str, "waits": str, "wait_ms_per_step": MsPerStep})
ClockDomainRow = TypedDict("ClockDomainRow", {"ranks": list[int], "offset_ns": Ns})
DurationsTest = TypedDict("DurationsTest", {
    "test": str, "steps": int, "p_family": float, "excess_ms_per_step": MsPerStep, "excess_pct": Pct,
    "steps_longer": int, "lag1_autocorrelation": float, "effective_steps": float})
ExtraOpRow = TypedDict("ExtraOpRow", {"name": str, "kind": str, "extra_ms": Ms}, total=False)
BeforeArrival = TypedDict("BeforeArrival", {
    "collectives": int, "interval_ms": Ms, "median_rank_interval_ms": Ms, "extra_gpu_work_ms": Ms,
    "extra_gpu_idle_ms": Ms, "extra_cpu_gap_ms": Ms, "extra_cpu_ops_ms": Ms, "top_extra_gpu": list[ExtraOpRow],
    "top_extra_cpu": list[ExtraOpRow], "extra_by_cause_ms": dict[str, Ms], "median_ranks": list[int]}, total=False)

StragglerEvidence = TypedDict("StragglerEvidence", {
    "kind": str, "share_last": Share, "steps_mostly_last": float, "median_lateness_ms": Ms, "p90_lateness_ms": Ms,
    "matched_collectives": int, "extra_work_before_collective_ms": Ms, "extra_transfer_ms": Ms,
    "slower_ops": list[SlowerOpRow], "peers_median_lateness_ms": Ms, "waiting_ranks": list[int], "position": str,
    "victims": list[VictimRow], "significance": Significance, "durations_test": DurationsTest,
    "before_arrival": BeforeArrival, "group": list[int], "whole_host": bool, "cost_share_if_real": Share,
    "transfer_excess_ms": Ms, "typical_transfer_ms": Ms, "next_rank_excess_ms": Ms,
    "skew_ns": Ns, "offsets_ns": dict[str, Ns], "sources": list[str],
    "host": str, "clock_domains": list[ClockDomainRow], "split_threshold_ms": Ms,
    "collective_events": int, "fallback": str, "mismatched_instances": int, "realigned_events": int,
    "refused_events": int, "groups": list[str], "caused_rank_ms": Ms, "times_last": int, "collectives": int,
    "steps": int, "mean_wait_per_other_rank_ms": Ms, "waited_for": dict[str, Ms],
}, total=False)

# One rank's step times (the summary's: steps, median, p90; the jitter's: median, p90, max).
StepRankRow = TypedDict("StepRankRow", {"steps": int, "median_ms": Ms, "p90_ms": Ms, "max_ms": Ms}, total=False)

StepsEvidence = TypedDict("StepsEvidence", {
    "per_rank": dict[str, StepRankRow], "source": str, "rank_median_ms": Ms, "others_median_ms": Ms,
    "peers_median_ms": Ms, "phase": str, "significance": Significance, "slow_step_extra_by_phase": dict[str, Share],
}, total=False)

DegradationEvidence = TypedDict("DegradationEvidence", {
    "period_steps": int, "spike_steps": list[int], "extra_ms": Ms, "median_step_ms": Ms, "change_step": int,
    "before_ms": Ms, "after_ms": Ms, "rise_by_rank_ms": dict[str, Ms], "significance": Significance,
}, total=False)

ExcessFrameRow = TypedDict("ExcessFrameRow", {"frame": str, "excess": float})
StackProfileEvidence = TypedDict("StackProfileEvidence", {
    "rank": int, "frame": str, "deepest_frame": str, "share": Share, "median_share": Share, "excess": float,
    "samples": int, "others_instead": str | None, "per_rank_share": dict[str, Share],
    "top_excess_frames": list[ExcessFrameRow], "method": str, "significance": Significance,
}, total=False)

ExpertBalanceEvidence = TypedDict("ExpertBalanceEvidence", {
    "heavy_ranks": list[int], "token_share": Share, "imbalance_median": float, "imbalance_max": float,
    "alltoalls": int, "wait_caused_ms_per_step": MsPerStep, "wait_share_of_step": Share,
    "received_rows": dict[str, int],
}, total=False)

# The replay's verdict on one job (`whatif.analyzer`); `why` alone when the replay could not be built.
WhatifEvidence = TypedDict("WhatifEvidence", {
    "job": str, "why": str, "verdict": str, "slowdown_S": float, "waste": float, "step_s": S, "ideal_step_s": S,
    "measured_step_s": S, "M_W": float, "M_S": float, "variation_share": Share, "replay_error": float,
    "cost_source": str, "steps": int, "top1_optype": str, "top1_S_t": float, "top2_optype": str,
    "top2_S_t": float, "top3_optype": str, "top3_S_t": float, "steps_left_out": int, "op_types_left_out": str,
    "workers": str, "fix_saves_s": S, "stage": int, "S_stage": float,
}, total=False)

PipelineEvidence = TypedDict("PipelineEvidence", {
    "layout": str, "layout_method": str, "layout_confidence": float, "schedule": str, "microbatches": int,
    "stages": int, "replicas": int, "ideal_bubble": float, "bubble": float, "stage_compute_share": list[Share],
    "recv_wait_share_by_stage": list[Share], "warmup_wait_ms_by_stage": list[Ms],
    "cooldown_wait_ms_by_stage": list[Ms], "recv_wait_ms_by_stage": list[Ms], "heavy_stage": int,
    "compute_per_microbatch_ms": list[Ms], "layers_per_microbatch": float, "move_layers": int, "move_to_stage": int,
    "step_ms": Ms, "balanced_step_ms": Ms, "pipeline_phase_ms": Ms, "simulated_saving_share_of_phase": Share,
    "test": str, "trials": int, "p_family": float, "excess_pct": Pct, "steps": int, "per_step_bubble": list[float],
    "microbatches_to_hide": int,
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
