"""Evidence fields: the unit of each evidence key, declared in one table, and the one fallback for keys not in it.

`field_of(key)` gives a key's label, unit and rate from `EVIDENCE_FIELDS`, else from the rule the names follow.
Constants and pure functions, no imports from the package: analyzers and reports may both import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvidenceField:
    """What an evidence key holds: the words of its label, its unit and its rate."""

    words: str
    unit: str = ""
    rate: str = ""

    @property
    def header(self) -> str:
        """The label with its unit, for the head of a table column: "idle (ms per step)"."""
        shown = {"share": "%", "timestamp": "ns", "bytes": "", "ns": ""}.get(self.unit, self.unit)
        suffix = " ".join(p for p in (shown, self.rate) if p)
        return f"{self.words} ({suffix})" if suffix else self.words


def _f(words: str, unit: str = "", rate: str = "") -> EvidenceField:
    return EvidenceField(words, unit, rate)


# The evidence keys of the built-in analyzers (and the columns of their evidence records), by unit.
EVIDENCE_FIELDS: dict[str, EvidenceField] = {
    # a count per s
    "cnp_per_s": _f("cnp", "", "per s"), "crc_per_s": _f("crc", "", "per s"),
    "drops_per_s": _f("drops", "", "per s"), "errors_per_s": _f("errors", "", "per s"),
    "overlimits_per_s": _f("overlimits", "", "per s"), "pause_episodes_per_s": _f("pause episodes", "", "per s"),
    "pause_frames_per_s": _f("pause frames", "", "per s"), "qdisc_drops_per_s": _f("qdisc drops", "", "per s"),
    "xmit_wait_per_s": _f("xmit wait", "", "per s"),
    # a count per step
    "count_per_step": _f("count", "", "per step"), "seconds_per_step": _f("seconds", "", "per step"),
    # %
    "excess_pct": _f("excess", "%"), "hidden_pct": _f("hidden", "%"), "overlap_pct": _f("overlap", "%"),
    "pct_of_roof": _f("of roof", "%"), "reference_pct_of_roof": _f("reference of roof", "%"),
    "reported_mfu_pct_median": _f("reported mfu median", "%"), "share_of_idle_pct": _f("share of idle", "%"),
    "share_pct": _f("share", "%"),
    # GB/s
    "algbw_gbs": _f("algbw", "GB/s"), "busbw_after_gbs": _f("busbw after", "GB/s"),
    "busbw_before_gbs": _f("busbw before", "GB/s"), "busbw_gbs": _f("busbw", "GB/s"),
    "busbw_median_gbs": _f("busbw median", "GB/s"), "busbw_p10_gbs": _f("busbw p10", "GB/s"),
    "median_busbw_gbs": _f("median busbw", "GB/s"), "nic_gbs_per_rank": _f("nic per rank", "GB/s"),
    "peers_busbw_gbs": _f("peers busbw", "GB/s"), "peers_spread_gbs": _f("peers spread", "GB/s"),
    # Gb/s
    "allgather_busbw_gbps": _f("allgather busbw", "Gb/s"), "allreduce_busbw_gbps": _f("allreduce busbw", "Gb/s"),
    "best_gbps": _f("best", "Gb/s"), "best_pair_gbps": _f("best pair", "Gb/s"), "copy_gbps": _f("copy", "Gb/s"),
    "d2h_gbps": _f("d2h", "Gb/s"), "gbps": _f("value", "Gb/s"), "h2d_gbps": _f("h2d", "Gb/s"),
    "inter_allgather_busbw_gbps": _f("inter allgather busbw", "Gb/s"),
    "inter_allreduce_busbw_gbps": _f("inter allreduce busbw", "Gb/s"),
    "node_allgather_busbw_gbps": _f("node allgather busbw", "Gb/s"),
    "node_allreduce_busbw_gbps": _f("node allreduce busbw", "Gb/s"), "peer_median_gbps": _f("peer median", "Gb/s"),
    "rate_gbps": _f("rate", "Gb/s"), "rx_gbps": _f("rx", "Gb/s"), "tx_gbps": _f("tx", "Gb/s"),
    "tx_gbps_peak": _f("tx peak", "Gb/s"),
    # MHz
    "job_median_sm_clock_mhz": _f("job median sm clock", "MHz"), "sm_clock_mhz": _f("sm clock", "MHz"),
    # W
    "power_limit_w": _f("power limit", "W"), "power_w_median": _f("power median", "W"),
    # bytes
    "bytes": _f("size", "bytes"), "min_bytes": _f("min", "bytes"),
    # ms
    "after_ms": _f("after", "ms"), "base_comm_ms": _f("base comm", "ms"),
    "base_compute_ms": _f("base compute", "ms"), "base_ms": _f("base", "ms"), "base_step_ms": _f("base step", "ms"),
    "before_ms": _f("before", "ms"), "best_ms": _f("best", "ms"), "caused_rank_ms": _f("caused rank", "ms"),
    "comm_ms_total": _f("comm total", "ms"), "dur_ms": _f("dur", "ms"), "effect_ms": _f("effect", "ms"),
    "excess_ms": _f("excess", "ms"), "extra_by_cause_ms": _f("extra by cause", "ms"),
    "extra_cpu_gap_ms": _f("extra cpu gap", "ms"), "extra_cpu_ops_ms": _f("extra cpu ops", "ms"),
    "extra_gpu_idle_ms": _f("extra gpu idle", "ms"), "extra_gpu_work_ms": _f("extra gpu work", "ms"),
    "extra_ms": _f("extra", "ms"), "extra_transfer_ms": _f("extra transfer", "ms"),
    "extra_work_before_collective_ms": _f("extra work before collective", "ms"), "gap_ms": _f("gap", "ms"),
    "gpu_ms": _f("gpu", "ms"), "interval_ms": _f("interval", "ms"), "lateness_ms": _f("lateness", "ms"),
    "lateness_ms_per_collective": _f("lateness per collective", "ms"), "max_ms": _f("max", "ms"),
    "mean_wait_per_other_rank_ms": _f("mean wait per other rank", "ms"),
    "median_lateness_ms": _f("median lateness", "ms"), "median_ms": _f("median", "ms"),
    "median_rank_interval_ms": _f("median rank interval", "ms"), "median_step_ms": _f("median step", "ms"),
    "min_ms": _f("min", "ms"), "ms": _f("time", "ms"), "ms_base": _f("base", "ms"), "ms_new": _f("new", "ms"),
    "new_comm_ms": _f("new comm", "ms"), "new_compute_ms": _f("new compute", "ms"), "new_ms": _f("new", "ms"),
    "new_step_ms": _f("new step", "ms"), "next_rank_excess_ms": _f("next rank excess", "ms"),
    "others_median_ms": _f("others median", "ms"), "others_spread_ms": _f("others spread", "ms"),
    "p90_lateness_ms": _f("p90 lateness", "ms"), "p90_ms": _f("p90", "ms"),
    "peers_excess_ms": _f("peers excess", "ms"), "peers_median_lateness_ms": _f("peers median lateness", "ms"),
    "peers_median_ms": _f("peers median", "ms"), "peers_p90_ms": _f("peers p90", "ms"),
    "rank_median_ms": _f("rank median", "ms"), "rise_by_rank_ms": _f("rise by rank", "ms"),
    "saved_ms_total": _f("saved total", "ms"), "saved_ms_total_upper_bound": _f("saved total upper bound", "ms"),
    "split_threshold_ms": _f("split threshold", "ms"), "start_ms": _f("start", "ms"), "step_ms": _f("step", "ms"),
    "top_op_base_ms": _f("top op base", "ms"), "top_op_new_ms": _f("top op new", "ms"),
    "transfer_after_ms": _f("transfer after", "ms"), "transfer_before_ms": _f("transfer before", "ms"),
    "transfer_excess_ms": _f("transfer excess", "ms"), "typical_transfer_ms": _f("typical transfer", "ms"),
    "wait_cost_ms": _f("wait cost", "ms"),
    # ms per step
    "base_ms_per_step": _f("base", "ms", "per step"), "excess_ms_per_step": _f("excess", "ms", "per step"),
    "explained_ms_per_step": _f("explained", "ms", "per step"),
    "exposed_ms_per_step": _f("exposed", "ms", "per step"), "extra_ms_per_step": _f("extra", "ms", "per step"),
    "idle_before_ms_per_step": _f("idle before", "ms", "per step"), "idle_ms_per_step": _f("idle", "ms", "per step"),
    "memory_exposed_ms_per_step": _f("memory exposed", "ms", "per step"),
    "ms_per_step": _f("time", "ms", "per step"), "new_ms_per_step": _f("new", "ms", "per step"),
    "peers_ms_per_step": _f("peers", "ms", "per step"),
    "waiting_for_late_ranks_ms_per_step": _f("waiting for late ranks", "ms", "per step"),
    # ns
    "arrival_ns": _f("arrival", "ns"), "busy_ns": _f("busy", "ns"), "caused_ns": _f("caused", "ns"),
    "comm_exposed_ns": _f("comm exposed", "ns"), "comm_ns": _f("comm", "ns"),
    "comm_overlapped_ns": _f("comm overlapped", "ns"), "compute_ns": _f("compute", "ns"),
    "dump_ns": _f("dump", "ns"), "dur_ns": _f("dur", "ns"), "gpu_ns": _f("gpu", "ns"),
    "hidden_ns": _f("hidden", "ns"), "idle_ns": _f("idle", "ns"), "mean_ns": _f("mean", "ns"),
    "measured_ns": _f("measured", "ns"), "memory_exposed_ns": _f("memory exposed", "ns"),
    "memory_ns": _f("memory", "ns"), "min_ns": _f("min", "ns"), "ns": _f("time", "ns"),
    "offset_ns": _f("offset", "ns"), "offsets_ns": _f("offsets", "ns"), "p90_ns": _f("p90", "ns"),
    "p90_ns_peers": _f("p90 peers", "ns"), "path_ns": _f("path", "ns"), "per_step_ns": _f("per step", "ns"),
    "per_step_ns_peers": _f("per step peers", "ns"), "replayed_ns": _f("replayed", "ns"),
    "self_ns": _f("self", "ns"), "skew_ns": _f("skew", "ns"), "span_ns": _f("span", "ns"),
    "step_ns": _f("step", "ns"), "sum_ns": _f("sum", "ns"), "t0_ns": _f("t0", "ns"), "t1_ns": _f("t1", "ns"),
    "total_ns": _f("total", "ns"), "transfer_ns": _f("transfer", "ns"), "wait_exposed_ns": _f("wait exposed", "ns"),
    "wait_ns": _f("wait", "ns"),
    # ns per step
    "ns_per_step": _f("time", "ns", "per step"),
    # s
    "cost_per_step_s": _f("cost per step", "s"), "dt_s": _f("dt", "s"), "dur_s": _f("dur", "s"),
    "elapsed_s": _f("elapsed", "s"), "estimate_s": _f("estimate", "s"), "gap_s": _f("gap", "s"),
    "max_s": _f("max", "s"), "mean_s": _f("mean", "s"), "median_lateness_s": _f("median lateness", "s"),
    "median_s": _f("median", "s"), "min_s": _f("min", "s"), "p90_lateness_s": _f("p90 lateness", "s"),
    "p90_s": _f("p90", "s"), "step_fastest_rank_s": _f("step fastest rank", "s"),
    "step_median_s": _f("step median", "s"), "step_p90_s": _f("step p90", "s"),
    "step_slowest_rank_s": _f("step slowest rank", "s"), "time_box_s": _f("time box", "s"),
    "total_s": _f("total", "s"), "typical_step_s": _f("typical step", "s"),
    "wait_per_step_s": _f("wait per step", "s"), "window_s": _f("window", "s"),
    # share
    "baseline_run_share": _f("baseline run share", "share"),
    "baseline_wait_share": _f("baseline wait share", "share"), "comm_share": _f("comm share", "share"),
    "cost_share_if_real": _f("cost share if real", "share"), "cpu_run_share": _f("cpu run share", "share"),
    "cpu_wait_share": _f("cpu wait share", "share"), "critical_share": _f("critical share", "share"),
    "drop_share": _f("drop share", "share"), "low_share": _f("low share", "share"),
    "median_share": _f("median share", "share"), "others_share_after": _f("others share after", "share"),
    "others_share_before": _f("others share before", "share"), "paused_share": _f("paused share", "share"),
    "peak_interval_share": _f("peak interval share", "share"), "per_rank_share": _f("per rank share", "share"),
    "run_share": _f("run share", "share"), "share": _f("share", "share"), "share_after": _f("share after", "share"),
    "share_before": _f("share before", "share"), "share_last": _f("share last", "share"),
    "share_of_step": _f("share of step", "share"), "wait_share": _f("wait share", "share"),
    "wait_share_min": _f("wait share min", "share"), "wait_share_of_time": _f("wait share of time", "share"),
    # timestamp
    "end_between_ns": _f("end between", "timestamp"), "end_ns": _f("end", "timestamp"),
    "last_sample_ns": _f("last sample", "timestamp"), "others_last_sample_ns": _f("others last sample", "timestamp"),
    "start_between_ns": _f("start between", "timestamp"), "start_ns": _f("start", "timestamp"),
    "ts_ns": _f("ts", "timestamp"), "window_ns": _f("window", "timestamp"),
    # us
    "allreduce_lat_us": _f("allreduce lat", "us"), "inter_allreduce_lat_us": _f("inter allreduce lat", "us"),
    "kernel_median_us": _f("kernel median", "us"), "mean_gpu_us": _f("mean gpu", "us"),
    "mean_pause_us": _f("mean pause", "us"), "median_gap_us": _f("median gap", "us"),
    "node_allreduce_lat_us": _f("node allreduce lat", "us"),
    # °C
    "temp_c_max": _f("temp max", "°C"), "temp_c_median": _f("temp median", "°C"),
}

_UNITS = {"gbps": "Gb/s", "gbs": "GB/s", "mhz": "MHz", "pct": "%", "ms": "ms", "us": "us", "ns": "ns", "s": "s",
          "w": "W", "c": "°C", "bytes": "bytes"}
_RATES = ((("per", "step"), "per step"), (("per", "s"), "per s"))
_TIMESTAMP = ("start", "end", "ts", "time", "at")


def field_of(key: str) -> EvidenceField:
    """The declared field of `key`, or the one its name says (`_by_name`) when it is not declared."""
    declared = EVIDENCE_FIELDS.get(key)
    return declared if declared is not None else _by_name(str(key))


def _by_name(key: str) -> EvidenceField:
    """The fallback: `idle_ms_per_step` -> idle, ms, per step; `comm_ms_total` -> comm total, ms; `share_last`
    -> a share; a `start`/`end`/`ts` key in ns -> a timestamp."""
    tokens, rate, unit = key.split("_"), "", ""
    for suffix, name in _RATES:
        if len(tokens) > len(suffix) and tokens[-len(suffix):] == list(suffix):
            tokens, rate = tokens[: -len(suffix)], name
            break
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] in _UNITS and (i > 0 or len(tokens[i]) > 1):
            unit = _UNITS[tokens.pop(i)]
            break
    if not unit and "share" in tokens:
        unit = "share"
    if unit == "ns" and tokens and tokens[0] in _TIMESTAMP:
        unit = "timestamp"
    words = " ".join(tokens) or ("time" if unit in ("ms", "us", "s", "ns") else "size" if unit == "bytes"
                                 else "value")
    return EvidenceField(words, unit, rate)
