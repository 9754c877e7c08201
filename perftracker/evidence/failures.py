"""The evidence of the failure and live findings: crashes, hangs, silent hosts, waited ranks, CPU
contention and baseline shifts.
Each type lists its keys several to a line, as a table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.common import Significance
from perftracker.evidence.units import Json, S, Share, Timestamp

CrashEvidence = TypedDict("CrashEvidence", {
    "consequence_of_a_lost_peer": bool, "consequences": list[Json], "culprit_lines": list[str],
    "failed_ranks_in_order": list[int], "host": str, "kind": str, "last": dict[str, str],
    "last_entered": dict[str, str], "lines": list[str], "lost_peer_ranks": list[int],
    "majority": dict[str, Json], "message": str, "no_dump": list[int], "numel": int, "op": str,
    "other_timeouts": dict[str, Json], "others": dict[str, Json], "own_errors": dict[str, str], "pg": str,
    "position": str, "positions": list[str], "rank": int, "root_ranks": list[int], "roots_in_job": int,
    "seq": int, "site": str, "stalls": list[Json], "timed_out_ranks": list[int],
    "waiting_behind": list[int], "watchdog_progress": dict[str, Json], "where": str, "xid": int,
}, total=False)

HangEvidence = TypedDict("HangEvidence", {
    "chosen_because": str, "groups": list[Json], "missing_ranks": list[int], "snapshot": str,
    "snapshot_time": str, "suspect_ranks": list[int], "waiting_ranks": list[int], "world_size": int,
}, total=False)

SilentHostEvidence = TypedDict("SilentHostEvidence", {
    "addresses": list[str], "consequent_ranks": list[int], "errors_naming_it": int, "gap_s": S,
    "host": str, "last_sample_ns": Timestamp, "others_last_sample_ns": Timestamp, "own_errors": int,
    "ranks": list[int],
}, total=False)

WaitedRankEvidence = TypedDict("WaitedRankEvidence", {
    "asleep": float, "baseline_subtracted": bool, "doing": str, "drop": float, "method": str,
    "others_asleep": float, "others_spread": float, "others_wait_frame": str, "rank": int,
    "significance": Significance, "since_step": int | None, "states": list[Json],
    "thresholds": dict[str, Json], "top_frames": list[Json],
}, total=False)

CpuContentionEvidence = TypedDict("CpuContentionEvidence", {
    "cpus": int, "load1": float, "method": str, "ranks": list[Json], "thresholds": dict[str, Json],
}, total=False)

BaselineShiftEvidence = TypedDict("BaselineShiftEvidence", {
    "frame": str, "method": str, "moved_frames": list[Json], "other_ranks_waiting": list[Json],
    "others_share_after": Share, "others_share_before": Share, "rank": int, "ranks_compared": int,
    "samples_after": int, "samples_before": int, "share_after": Share, "share_before": Share,
    "significance": Significance, "since_step": int | None, "waiting_after": float,
    "waiting_before": float,
}, total=False)


EVIDENCE = {
    "crash": CrashEvidence,
    "hang": HangEvidence,
    "silent_host": SilentHostEvidence,
    "waited_rank": WaitedRankEvidence,
    "cpu_contention": CpuContentionEvidence,
    "baseline_shift": BaselineShiftEvidence,
}
