"""The evidence of the failure and live findings: crashes, hangs, silent hosts, waited ranks, CPU
contention and baseline shifts.
Each type lists its keys several to a line, as a table; a row type is one record of a sub-table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.common import Significance
from perftracker.evidence.units import Json, S, Share, Timestamp

# A rank's flight-recorder progress in one process group; what ranks ran at a mismatched collective.
FrProgress = TypedDict("FrProgress", {"last_entered": int, "last_completed": int})
RanCall = TypedDict("RanCall", {"ranks": list[int], "op": str, "sizes": str}, total=False)
# A stuck collective a wait-for root holds up; a rank whose collectives stopped completing before its peer's.
Consequence = TypedDict("Consequence", {
    "pg": str, "pg_desc": str, "seq": int, "op": str, "sizes": str, "waiting_ranks": list[int],
    "missing_ranks": list[int], "no_dump": list[int], "since": str, "source": str})
StalledRank = TypedDict("StalledRank", {
    "rank": int, "pg": str, "pg_desc": str, "last_completed": int, "peer": int, "peer_completed": int})

# The variants: a wait-for root (root_ranks...), a stuck or skipped collective of the dumps (per_rank...), a
# mismatch (majority), an NCCL or gloo timeout (timed_out_ranks...), the first failure (rank...), an Xid (xid).
CrashEvidence = TypedDict("CrashEvidence", {
    "root_ranks": list[int], "kind": str, "last": dict[str, str], "last_entered": dict[str, str],
    "waiting_behind": list[int], "consequences": list[Consequence], "stalls": list[StalledRank],
    "own_errors": dict[str, str], "no_dump": list[int], "roots_in_job": int,
    "pg": str, "pg_desc": str, "seq": int, "op": str, "input_sizes": str, "dtypes": str, "waiting_ranks": list[int],
    "never_entered": list[int], "per_rank": dict[str, FrProgress], "majority": RanCall,
    "others": dict[str, RanCall] | dict[str, str], "numel": int, "timed_out_ranks": list[int],
    "other_timeouts": dict[str, list[int]], "lines": list[str], "watchdog_progress": dict[str, Json],
    "site": str, "lost_peer_ranks": list[int], "culprit_lines": list[str],
    "rank": int, "message": str, "where": str, "failed_ranks_in_order": list[int],
    "consequence_of_a_lost_peer": bool, "xid": int, "host": str,
}, total=False)

# The ranks that wait at one (collective, frame) in a stack snapshot.
HangGroup = TypedDict("HangGroup", {
    "ranks": list[int], "collective": str, "where": str, "site": str, "idle": bool, "host": str, "frames": list[str]})
HangEvidence = TypedDict("HangEvidence", {
    "chosen_because": str, "groups": list[HangGroup], "missing_ranks": list[int], "snapshot": str,
    "snapshot_time": str, "suspect_ranks": list[int], "waiting_ranks": list[int], "world_size": int,
}, total=False)

SilentHostEvidence = TypedDict("SilentHostEvidence", {
    "addresses": list[str], "consequent_ranks": list[int], "errors_naming_it": int, "gap_s": S,
    "host": str, "last_sample_ns": Timestamp, "others_last_sample_ns": Timestamp, "own_errors": int,
    "ranks": list[int],
})

# One rank's main-thread states in the incident's window (shares of its samples); a frame's share of samples.
RankStates = TypedDict("RankStates", {
    "rank": int, "samples": int, "asleep": float, "stopped": float, "running": float, "io": float,
    "baseline_asleep": float | None, "cpu_run_share": Share | None, "cpu_wait_share": Share | None})
FrameShare = TypedDict("FrameShare", {"frame": str, "share": Share})
WaitedRankEvidence = TypedDict("WaitedRankEvidence", {
    "asleep": float, "baseline_subtracted": bool, "doing": str, "drop": float, "method": str,
    "others_asleep": float, "others_spread": float, "others_wait_frame": str, "rank": int,
    "significance": Significance, "since_step": int | None, "states": list[RankStates],
    "thresholds": dict[str, float], "top_frames": list[FrameShare],
}, total=False)

# One rank's process over the incident's window, and over the baseline's.
RankCpu = TypedDict("RankCpu", {
    "rank": int, "wait_share": Share, "run_share": Share, "window_s": S, "baseline_wait_share": Share | None,
    "baseline_run_share": Share | None})
CpuContentionEvidence = TypedDict("CpuContentionEvidence", {
    "cpus": int, "load1": float, "method": str, "ranks": list[RankCpu], "thresholds": dict[str, float],
})

# Another rank's waiting before and after; a frame whose share of the rank's samples rose.
OtherWaiting = TypedDict("OtherWaiting", {"rank": int, "frame": str, "waiting_before": float, "waiting_after": float})
MovedFrame = TypedDict("MovedFrame", {"frame": str, "share_before": Share, "share_after": Share, "excess": float})
BaselineShiftEvidence = TypedDict("BaselineShiftEvidence", {
    "frame": str, "method": str, "moved_frames": list[MovedFrame], "other_ranks_waiting": list[OtherWaiting],
    "others_share_after": Share | None, "others_share_before": Share | None, "rank": int, "ranks_compared": int,
    "samples_after": int, "samples_before": int, "share_after": Share | None, "share_before": Share | None,
    "significance": Significance, "since_step": int | None, "waiting_after": float, "waiting_before": float,
})


EVIDENCE = {
    "crash": CrashEvidence,
    "hang": HangEvidence,
    "silent_host": SilentHostEvidence,
    "waited_rank": WaitedRankEvidence,
    "cpu_contention": CpuContentionEvidence,
    "baseline_shift": BaselineShiftEvidence,
}
