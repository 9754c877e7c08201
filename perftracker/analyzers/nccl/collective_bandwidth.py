"""Bandwidth drops from NCCL Inspector records: a communicator's collectives getting slower over time, or one
communicator slower than its peers of the same shape, beyond the run's own spread.
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.nccl.collective_timing import inspector_collectives_view
from perftracker.analyzers.stragglers.degradation import change_point, spikes
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.network import NcclBandwidthEvidence


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} B"


def collective_series_view(analysis: Analysis) -> pd.DataFrame:
    """One row per collective (communicator, seq): op, bytes, comm size, transfer time (the shortest
    member's exec time, s) and bandwidth (the best member's busbw), members and their hosts."""
    frame = analysis.view(inspector_collectives_view)
    if frame.empty:
        return pd.DataFrame(columns=["comm_id", "comm_name", "comm_size", "op", "bytes", "seq", "transfer_s",
                                     "busbw_gbs", "members"])
    return frame.groupby(["comm_id", "seq"]).agg(
        comm_name=("comm_name", "first"), comm_size=("comm_size", "max"), op=("op", "first"),
        bytes=("bytes", "first"), transfer_s=("dur_s", "min"), busbw_gbs=("busbw_gbs", "max"),
        members=("rank", "nunique")).reset_index()


def inspector_bandwidth_view(analysis: Analysis) -> pd.DataFrame:
    """Per (communicator, op, size): collectives, median and p10 busbw (GB/s), median transfer time (ms)."""
    series = analysis.view(collective_series_view)
    if series.empty:
        return pd.DataFrame(columns=["comm_id", "comm_name", "comm_size", "op", "bytes", "collectives",
                                     "busbw_median_gbs", "busbw_p10_gbs", "transfer_median_ms"])
    table = series.groupby(["comm_id", "op", "bytes"]).agg(
        comm_name=("comm_name", "first"), comm_size=("comm_size", "max"), collectives=("seq", "count"),
        busbw_median_gbs=("busbw_gbs", "median"), busbw_p10_gbs=("busbw_gbs", lambda b: b.quantile(0.1)),
        transfer_median_ms=("transfer_s", "median")).reset_index()
    table["transfer_median_ms"] = (table["transfer_median_ms"] * 1e3).round(4)
    return table.round({"busbw_median_gbs": 3, "busbw_p10_gbs": 3})


def _hosts(frame: pd.DataFrame, comm: str) -> set[str]:
    return {str(h) for h in frame.loc[frame["comm_id"] == comm, "host"] if str(h)}


def _ranks(frame: pd.DataFrame, comm: str) -> tuple[int, ...]:
    return tuple(sorted(int(r) for r in frame.loc[frame["comm_id"] == comm, "rank"].unique()))


def analyze_inspector_bandwidth(analysis: Analysis) -> list[Finding]:
    series = analysis.view(collective_series_view)
    if series.empty:
        return []
    rows = analysis.view(inspector_collectives_view)
    groups = [((str(comm), str(op), int(str(nbytes))), part.sort_values("seq"))
              for (comm, op, nbytes), part in series.groupby(["comm_id", "op", "bytes"])
              if len(part) >= threshold_int("degradation.min_steps")]
    peer_sets = [part for _, part in series.groupby(["op", "bytes", "comm_size"]) if part["comm_id"].nunique() >= 3]
    tests = max(len(groups) + len(peer_sets), 1)
    findings = [f for key, part in groups if (f := _over_time(rows, key, part, tests)) is not None]
    findings.extend(f for part in peer_sets if (f := _against_peers(rows, part)) is not None)
    return findings


def _over_time(rows: pd.DataFrame, key: tuple[str, str, int], part: pd.DataFrame, tests: int) -> Finding | None:
    comm, op, nbytes = key
    transfer = pd.Series(part["transfer_s"].to_numpy(dtype=float), index=part["seq"].to_numpy())
    mask = spikes(transfer)
    cp = change_point(transfer[~mask])
    if cp is None or not cp.verdict.sustained or cp.verdict.p_corrected * tests > threshold("straggler.alpha"):
        return None
    before = float(part.loc[part["seq"] < cp.step, "busbw_gbs"].median())
    after = float(part.loc[part["seq"] >= cp.step, "busbw_gbs"].median())
    name, size = str(part["comm_name"].iloc[0]), _size(int(nbytes))
    drop = 1.0 - after / before if before > 0 else 0.0
    extra = cp.after_s - cp.before_s
    return Finding(
        analyzer="nccl_bandwidth",
        severity=Severity.CRITICAL if drop >= threshold("nccl.bandwidth.critical_drop") else Severity.WARNING,
        title=(f"NCCL {op} of {size} on communicator {name} got slower from collective #{cp.step}: bus bandwidth "
               f"{before:.1f} -> {after:.1f} GB/s (-{100 * drop:.0f}%, NCCL Inspector)"),
        recommendation=("The transfer itself slowed (the last rank to arrive waits for no one, and its time rose), "
                        "so look at the links of these hosts from that moment: NIC / NVLink errors and link "
                        "rate (`perftracker attach` samples RDMA and NVML counters), a transport fallback in the "
                        "NCCL log (NCCL_DEBUG=INFO), or other traffic on the fabric."),
        evidence=NcclBandwidthEvidence(
            source="NCCL Inspector", communicator={"id": comm, "name": name, "size": int(part["comm_size"].max())},
            op=op, bytes=int(nbytes), change_seq=cp.step, busbw_before_gbs=round(before, 3),
            busbw_after_gbs=round(after, 3), transfer_before_ms=round(cp.before_s * 1e3, 4),
            transfer_after_ms=round(cp.after_s * 1e3, 4), collectives=len(part),
            significance={"p_corrected": round(cp.verdict.p_corrected * tests, 5), "tests": tests,
                          "autocorrelation": round(cp.verdict.autocorrelation, 3)}),
        ranks=_ranks(rows, comm), hosts=tuple(sorted(_hosts(rows, comm))),
        confidence=max(0.0, 1.0 - cp.verdict.p_corrected * tests),
        cost=Cost(extra, extra / cp.after_s if cp.after_s > 0 else 0.0), key=f"nccl_bandwidth:time:{comm}:{op}:{nbytes}")


def _against_peers(rows: pd.DataFrame, part: pd.DataFrame) -> Finding | None:
    level = part.groupby("comm_id")["busbw_gbs"].median().dropna()
    if len(level) < 3:
        return None
    worst = str(level.idxmin())
    others = level.drop(worst)
    reference, spread = float(others.median()), float(others.max() - others.min())
    low = float(level[worst])
    if not (low < (1.0 - threshold("nccl.bandwidth.peer_drop")) * reference and float(others.min()) - low > threshold("nccl.bandwidth.min_gap_over_spread") * spread):
        return None
    mine, normal = _hosts(rows, worst), set().union(*(_hosts(rows, str(c)) for c in others.index))
    hosts = sorted(mine - normal) or sorted(mine)
    op, nbytes = str(part["op"].iloc[0]), int(part["bytes"].iloc[0])
    name = str(part.loc[part["comm_id"] == worst, "comm_name"].iloc[0])
    transfer = part.groupby("comm_id")["transfer_s"].median()
    extra = float(transfer[worst] - transfer.drop(worst).median())
    return Finding(
        analyzer="nccl_bandwidth", severity=Severity.WARNING,
        title=(f"NCCL {op} of {_size(nbytes)} on communicator {name} reaches {low:.1f} GB/s bus bandwidth, its "
               f"{len(others)} peer communicators {reference:.1f} GB/s (-{100 * (1 - low / reference):.0f}%)"
               + (f": host {', '.join(hosts)}" if hosts and mine - normal else "")),
        recommendation=("Communicators of the same shape should move data equally fast; this one is slower, so "
                        "check the links of its hosts (NIC and NVLink errors, link rate, PCIe width) and the "
                        "transport NCCL chose for it (NCCL_DEBUG=INFO)."),
        evidence=NcclBandwidthEvidence(
            source="NCCL Inspector", op=op, bytes=int(nbytes), communicator=worst, busbw_gbs=round(low, 3),
            peers_busbw_gbs={str(c): round(float(v), 3) for c, v in others.items()}, peers_spread_gbs=round(spread, 3)),
        ranks=_ranks(rows, worst), hosts=tuple(hosts),
        cost=Cost(max(extra, 0.0), 0.0), key=f"nccl_bandwidth:peers:{worst}:{op}:{nbytes}")
