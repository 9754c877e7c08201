"""The evidence of the NCCL and hardware-health findings: NCCL configuration, bandwidth and stragglers,
topology, links, RDMA, PFC and GPU health.
Each type lists its keys several to a line, as a table."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.common import Significance
from perftracker.evidence.units import Bytes, Celsius, Gbps, GBs, Json, MHz, Ms, Ns, Pct, PerS, S, Share, W

NcclConfigEvidence = TypedDict("NcclConfigEvidence", {
    "bootstrap": dict[str, Json], "bound_by": str, "cause": str, "channels": int, "channels_hardware": int,
    "count": int, "dead": list[str], "devices": list[str], "distinct": dict[str, Json], "dscp_if_tc": int,
    "env": list[str], "error_chains": list[str], "expected": str, "expected_busbw_gbs": GBs, "flag": str,
    "gap_x": float, "gids": list[str], "gpus": list[str], "host": str, "ib_settings": list[str],
    "joined_with": str, "log": list[str], "matched": list[str], "measured": str, "measured_busbw_gbs": GBs,
    "mismatch": list[str], "missing": list[str], "missing_ranks": list[str], "nccl_default": int,
    "nccl_reads": int, "nvlink_path_gbs": list[GBs], "nvlinks_hardware": int, "nvlinks_seen": float,
    "parts": dict[str, Json], "peer": str, "positions": list[str], "problems": list[Json], "profile": Json,
    "ranks_per_node": int, "reasons": list[str], "statuses": dict[str, int], "subject": str, "sysfs": Json,
    "sysfs_devices": list[str], "sysfs_root": str, "sysfs_status": str, "total_s": S,
    "transports": list[str], "values": dict[str, Json], "vendor_errs": list[str],
    "wait_for_root_ranks": list[int], "warn_lines": int, "wrong": int,
}, total=False)

NcclBandwidthEvidence = TypedDict("NcclBandwidthEvidence", {
    "busbw_after_gbs": GBs, "busbw_before_gbs": GBs, "busbw_gbs": GBs, "bytes": Bytes, "change_seq": int,
    "collectives": int, "communicator": Json, "op": str, "peers_busbw_gbs": dict[str, Json],
    "peers_spread_gbs": GBs, "significance": Significance, "source": str, "transfer_after_ms": Ms,
    "transfer_before_ms": Ms,
}, total=False)

NcclStragglerEvidence = TypedDict("NcclStragglerEvidence", {
    "collectives": int, "communicator": dict[str, Json], "communicators_naming_it": list[Json],
    "cost_basis": str, "lateness_ms_per_collective": Ms, "members": list[int], "method": str,
    "others_spread_ms": Ms, "source": str, "times_last": int, "trials": int, "wait_share_of_time": Share,
    "window_s": S,
}, total=False)

TopologyEvidence = TypedDict("TopologyEvidence", {
    "ranks": list[Json],
}, total=False)

BandwidthEvidence = TypedDict("BandwidthEvidence", {
    "best_quantile": float, "collectives": list[Json], "hosts": int, "low_share": Share,
    "min_bytes": Bytes, "nic_gbs_per_rank": GBs | None, "positions": list[str], "slow": list[Json],
}, total=False)

LinksEvidence = TypedDict("LinksEvidence", {
    "also_saw": list[Json], "check": str, "collective": str | None, "comm_share": Share | None,
    "cost_is": str, "downs": list[Json], "drops": dict[str, Json], "errors_per_s": dict[str, Json],
    "host": str, "iface": str, "links": list[Json], "others_speed_mbps": float,
    "others_tx_peak_mbps": float, "overlimits_per_s": PerS, "qdisc_drops_per_s": PerS,
    "shaper_mbps": float, "speed_mbps": float, "stalled_seconds": float, "thresholds": dict[str, Json],
    "tx_peak_mbps": float, "used_because": str, "window": dict[str, Json],
}, total=False)

RdmaEvidence = TypedDict("RdmaEvidence", {
    "busiest": dict[str, Json], "busy_ports": list[str], "check": str, "device": str, "host": str,
    "idle_share": Share, "increases": dict[str, Json], "nccl_ib_hca": list[Json],
    "peak_rates": dict[str, Json], "peer_rate_gbps": Gbps, "peer_width": float, "port": str,
    "ports": list[Json], "rate_gbps": Gbps, "rates": dict[str, Json], "state_id": int,
    "threshold_per_s": PerS, "thresholds": dict[str, Json], "traffic_gbps": Gbps,
    "was_inactive_during_window": bool, "width": float, "window": dict[str, Json],
}, total=False)

RdmaPfcEvidence = TypedDict("RdmaPfcEvidence", {
    "check": str, "congestion_control": dict[str, Json], "device": str, "host": str,
    "increases": dict[str, int], "lossless_priorities": list[str], "netdev": str, "port": str,
    "priorities": dict[str, Json], "priority": str, "rates": dict[str, float], "share_of_time": Share,
    "threshold_per_s": PerS, "thresholds": dict[str, Json], "window": dict[str, Json],
}, total=False)

GpuHealthEvidence = TypedDict("GpuHealthEvidence", {
    "check": str, "current": float, "deficit": float, "ecc_dbe_new": float, "gap_threshold": float,
    "gpu": int, "host": str, "job_median_sm_clock_mhz": MHz, "job_median_util_pct": Pct, "maximum": float,
    "periods": list[Json], "power_limit_w": W | None, "power_w_median": W, "ranks": list[int],
    "reason": str, "samples": int, "share_of_samples": Share, "share_of_time": Share,
    "significance": Significance, "sm_clock_mhz": MHz, "sm_clock_mhz_throttled": MHz | None,
    "temp_c_max": Celsius, "temp_c_median": Celsius, "threshold": float, "thresholds": dict[str, Json],
    "util_gpu_pct": Pct, "window": dict[str, Json], "xid_times_ns": list[Ns], "xids": list[int],
}, total=False)

GpuLinksEvidence = TypedDict("GpuLinksEvidence", {
    "check": str, "crc_rate_per_s": PerS, "first_down_ns": Ns, "first_rise_ns": Ns, "gpu": int,
    "host": str, "job_median_sm_clock_mhz": MHz, "nvlink_active_last": float, "nvlink_active_min": float,
    "nvlink_crc_data_increase": float, "nvlink_crc_flit_increase": float, "nvlink_links": float,
    "nvlink_recovery_increase": float, "nvlink_replay_increase": float, "pcie_replay_increase": float,
    "peers_nvlink_active": float, "power_limit_w": W, "power_w_median": W, "ranks": list[int],
    "rate_per_min": float, "replay_rate_per_min": float, "samples": int, "share_of_samples": Share,
    "sm_clock_mhz": MHz, "temp_c_max": Celsius, "temp_c_median": Celsius, "threshold_per_min": float,
    "thresholds": dict[str, Json], "window": dict[str, Json], "window_s": S,
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
