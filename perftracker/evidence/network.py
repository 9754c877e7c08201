"""The evidence of the NCCL and hardware-health findings: NCCL configuration, bandwidth and stragglers,
topology, links, RDMA, PFC and GPU health.
Each type lists its keys several to a line, as a table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.common import Location, Significance
from perftracker.evidence.units import (
    Bytes,
    Celsius,
    Gbps,
    GBs,
    Json,
    Mbps,
    MHz,
    Ms,
    Pct,
    PerS,
    S,
    Share,
    Timestamp,
    Us,
    W,
)

# What one NCCL rule found (a merged problem's `evidence` too).
NcclRuleEvidence = TypedDict("NcclRuleEvidence", {
    "bootstrap": dict[str, list[str]], "bound_by": str, "cause": str, "channels": int, "channels_hardware": int,
    "count": int, "dead": list[str], "devices": list[str], "distinct": dict[str, int], "dscp_if_tc": int,
    "env": list[str], "error_chains": list[str], "errors": list[str], "expected": str, "expected_busbw_gbs": GBs,
    "gap_x": float, "gids": list[str], "gpus": list[str], "host": str, "ib_settings": list[str], "log": list[str],
    "matched": list[str], "measured": str, "measured_busbw_gbs": GBs, "mismatch": list[str], "missing": list[str],
    "missing_ranks": list[str], "nccl_default": int, "nccl_reads": int, "nvlink_path_gbs": list[GBs],
    "nvlinks_hardware": int, "nvlinks_seen": float, "parts": dict[str, Json], "peer": str, "profile": str | int,
    "ranks_per_node": int, "reasons": list[str], "statuses": dict[str, int], "sysfs": str | list[str],
    "sysfs_devices": list[str], "sysfs_root": str, "sysfs_status": str, "total_s": S, "transports": list[str],
    "values": dict[str, list[str]], "vendor_errs": list[str], "warn_lines": int, "wrong": int,
}, total=False)

# A problem merged into another of the same subject (`merge.one_per_subject`).
NcclProblem = TypedDict("NcclProblem", {
    "flag": str | None, "severity": str, "title": str, "recommendation": str, "evidence": NcclRuleEvidence})


class NcclConfigEvidence(NcclRuleEvidence, total=False):
    """A finding of the NCCL rules: its problem class (`flag`), what it is about (`subject`, until merged) and the
    problems of the same subject merged into it; a RAS finding about the hang's root, the ranks it joins; the
    ranks' places in the layout (the positions pass)."""
    flag: str
    subject: str
    problems: list[NcclProblem]
    wait_for_root_ranks: list[int]
    joined_with: str
    positions: list[str]

# A communicator as NCCL Inspector names it (`ops`: the collectives it was judged on).
Communicator = TypedDict("Communicator", {"id": str, "name": str, "size": int, "ops": str}, total=False)

NcclBandwidthEvidence = TypedDict("NcclBandwidthEvidence", {
    "busbw_after_gbs": GBs, "busbw_before_gbs": GBs, "busbw_gbs": GBs, "bytes": Bytes, "change_seq": int,
    "collectives": int, "communicator": Communicator | str, "op": str, "peers_busbw_gbs": dict[str, GBs],
    "peers_spread_gbs": GBs, "significance": Significance, "source": str, "transfer_after_ms": Ms,
    "transfer_before_ms": Ms,
}, total=False)

# Another communicator whose collectives name the same late rank.
NamingCommunicator = TypedDict("NamingCommunicator", {"id": str, "name": str, "lateness_ms": Ms})

NcclStragglerEvidence = TypedDict("NcclStragglerEvidence", {
    "collectives": int, "communicator": Communicator, "communicators_naming_it": list[NamingCommunicator],
    "cost_basis": str, "lateness_ms_per_collective": Ms, "members": list[int], "method": str,
    "others_spread_ms": Ms, "source": str, "times_last": int, "trials": int, "wait_share_of_time": Share,
    "window_s": S,
}, total=False)

TopologyEvidence = TypedDict("TopologyEvidence", {"ranks": list[Location]}, total=False)

# One collective shape of the traces (`bandwidth.collective_bandwidth`): its calls, times and bandwidths.
CollectiveRow = TypedDict("CollectiveRow", {
    "pg": str, "collective": str, "bytes": Bytes, "group_size": int, "calls": int, "ranks": int, "best_ms": Ms,
    "median_ms": Ms, "algbw_gbs": GBs, "busbw_gbs": GBs, "median_busbw_gbs": GBs, "factor": float,
    "slowest_rank": int,
})

BandwidthEvidence = TypedDict("BandwidthEvidence", {
    "best_quantile": float, "collectives": list[CollectiveRow], "hosts": int, "low_share": Share,
    "min_bytes": Bytes, "nic_gbs_per_rank": GBs | None, "slow": list[CollectiveRow],
}, total=False)

# The samples a finding rests on: the first one's start, the last one's end (ns since the epoch), its length.
Window = TypedDict("Window", {"start_ns": Timestamp, "end_ns": Timestamp, "seconds": S}, total=False)

# The job's stall while a link was down (`link_stalls.Stall`).
LinkStall = TypedDict("LinkStall", {
    "step": int, "seconds": S, "ranks": list[int], "world": int, "collective": str, "phase": str,
    "typical_step_s": S,
})

# One period a link was down, each bound between the samples around it.
LinkDown = TypedDict("LinkDown", {
    "start_ns": Timestamp, "end_ns": Timestamp, "seconds": S | None, "start_between_ns": list[Timestamp],
    "end_between_ns": list[Timestamp], "samples_down": int, "taken_down": bool, "carrier_changes": int,
    "stall": LinkStall,
}, total=False)

# What another host saw while the link was down: TCP trouble, its traffic stopped, or its carrier lost too.
PeerSaw = TypedDict("PeerSaw", {
    "host": str, "tcp_retransmits": int, "tcp_timeouts": int, "traffic_stopped_on": list[str],
    "typical_mbps": Mbps, "carrier_lost_on": str,
}, total=False)

DropRate = TypedDict("DropRate", {"per_s": PerS, "share": Share})

# One interface the job used (`links._link_stats`): why it was judged, its peak rate, speed and shaper.
LinkStat = TypedDict("LinkStat", {
    "host": str, "iface": str, "why": str, "peak_mbps": Mbps | None, "tx_peak_mbps": Mbps | None,
    "speed_mbps": Mbps | None, "shaper_mbps": Mbps | None, "overlimits_per_s": PerS, "qdisc_drops_per_s": PerS,
    "window": Window,
})

# The same measured by `links._link_stats`, NaN where not measured.
LinkMeasures = TypedDict("LinkMeasures", {
    "host": str, "iface": str, "why": str, "peak_mbps": Mbps, "tx_peak_mbps": Mbps, "speed_mbps": Mbps,
    "shaper_mbps": Mbps, "overlimits_per_s": PerS, "qdisc_drops_per_s": PerS, "window": Window})

LinksEvidence = TypedDict("LinksEvidence", {
    "also_saw": list[PeerSaw], "check": str, "collective": str | None, "comm_share": Share | None,
    "cost_is": str, "downs": list[LinkDown], "drops": dict[str, DropRate], "errors_per_s": dict[str, PerS],
    "host": str, "iface": str, "links": list[LinkStat], "others_speed_mbps": Mbps | None,
    "others_tx_peak_mbps": Mbps | None, "overlimits_per_s": PerS, "qdisc_drops_per_s": PerS,
    "shaper_mbps": Mbps | None, "speed_mbps": Mbps | None, "stalled_seconds": float,
    "thresholds": dict[str, float], "tx_peak_mbps": Mbps, "used_because": str, "window": Window,
}, total=False)

# One RDMA port's mean and peak throughput (`rdma._throughput`).
PortThroughput = TypedDict("PortThroughput", {
    "device": str, "port": str, "tx_gbps": Gbps, "rx_gbps": Gbps, "tx_gbps_peak": Gbps, "rate_gbps": Gbps,
    "utilization": float | None, "window": Window,
})

BusiestPort = TypedDict("BusiestPort", {"device": str, "port": str, "gbps": Gbps})

RdmaEvidence = TypedDict("RdmaEvidence", {
    "busiest": BusiestPort, "busy_ports": list[str], "check": str, "device": str, "host": str,
    "idle_share": Share, "increases": dict[str, int], "nccl_ib_hca": list[str],
    "peak_rates": dict[str, PerS], "peer_rate_gbps": Gbps, "peer_width": float, "port": str,
    "ports": list[PortThroughput], "rate_gbps": Gbps, "rates": dict[str, PerS], "state_id": int,
    "threshold_per_s": PerS, "thresholds": dict[str, float], "traffic_gbps": Gbps,
    "was_inactive_during_window": bool, "width": float, "window": Window,
}, total=False)

# One direction and priority of a port's PFC pauses (`rdma_pfc.pauses`).
PfcPauses = TypedDict("PfcPauses", {
    "paused_share": Share | None, "peak_interval_share": Share | None, "pause_frames_per_s": PerS,
    "pause_episodes_per_s": PerS, "mean_pause_us": Us | None, "moved": bool,
})

RdmaPfcEvidence = TypedDict("RdmaPfcEvidence", {
    "check": str, "congestion_control": dict[str, PerS], "device": str, "host": str,
    "increases": dict[str, int], "lossless_priorities": list[str], "netdev": str, "port": str,
    "priorities": dict[str, PfcPauses], "priority": str, "rates": dict[str, PerS], "share_of_time": Share,
    "threshold_per_s": PerS, "thresholds": dict[str, float], "window": Window,
}, total=False)

GpuHealthEvidence = TypedDict("GpuHealthEvidence", {
    "check": str, "current": float | None, "deficit": float, "ecc_dbe_new": float | None, "ecc_sbe_new": float,
    "gap_threshold": float, "gpu": int, "host": str, "job_median_sm_clock_mhz": MHz | None,
    "job_median_util_pct": Pct, "maximum": float | None, "periods": list[list[int]], "power_limit_w": W | None,
    "power_w_median": W | None, "ranks": list[int], "reason": str, "samples": int, "share_of_samples": Share,
    "share_of_time": Share, "significance": Significance, "sm_clock_mhz": MHz | None,
    "sm_clock_mhz_throttled": MHz | None, "temp_c_max": Celsius | None, "temp_c_median": Celsius | None,
    "threshold": float, "thresholds": dict[str, float], "util_gpu_pct": Pct, "window": Window,
    "xid_times_ns": list[Timestamp], "xids": list[int],
}, total=False)

GpuLinksEvidence = TypedDict("GpuLinksEvidence", {
    "check": str, "crc_rate_per_s": PerS | None, "first_down_ns": Timestamp, "first_rise_ns": Timestamp, "gpu": int,
    "host": str, "job_median_sm_clock_mhz": MHz | None, "nvlink_active_last": float, "nvlink_active_min": float,
    "nvlink_crc_data_increase": float, "nvlink_crc_flit_increase": float, "nvlink_links": float,
    "nvlink_recovery_increase": float, "nvlink_replay_increase": float, "pcie_replay_increase": float,
    "peers_nvlink_active": float | None, "power_limit_w": W | None, "power_w_median": W | None,
    "ranks": list[int], "rate_per_min": float | None, "replay_rate_per_min": float | None, "samples": int,
    "share_of_samples": Share, "sm_clock_mhz": MHz | None, "temp_c_max": Celsius | None,
    "temp_c_median": Celsius | None, "threshold_per_min": float, "thresholds": dict[str, float],
    "window": Window, "window_s": S,
}, total=False)


EVIDENCE = {
    "nccl_config": NcclConfigEvidence,
    "nccl_bandwidth": NcclBandwidthEvidence,
    "nccl_straggler": NcclStragglerEvidence,
    "topology": TopologyEvidence,
    "bandwidth": BandwidthEvidence,
    "links": LinksEvidence,
    "rdma": RdmaEvidence,
    "rdma_pfc": RdmaPfcEvidence,
    "gpu_health": GpuHealthEvidence,
    "gpu_links": GpuLinksEvidence,
}
