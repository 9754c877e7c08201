"""Achieved collective bandwidth from traces, compared with the NICs' link rate."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.topology import rank_map_view, records
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.network import BandwidthEvidence, CollectiveRow
from perftracker.store import Store

_RING = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1, "alltoall": 1}  # x (n - 1) / n
_ROUNDED = ("best_ms", "median_ms", "algbw_gbs", "busbw_gbs", "median_busbw_gbs", "factor")


def bus_factor(collective: str, n: int) -> float:
    """The ring factor that turns algorithm bandwidth into bus bandwidth for `n` ranks."""
    name = collective.lower().lstrip("_").replace("allreduce", "all_reduce").replace("allgather", "all_gather")
    name = name.replace("reducescatter", "reduce_scatter").replace("_base", "").replace("_into_tensor", "")
    ring = _RING.get(name)
    return float(ring * (n - 1) / n) if ring is not None and n > 0 else 1.0


def collective_bandwidth(store: Store) -> pd.DataFrame:
    """Per (pg, collective, bytes, group_size): calls, best and median time, algbw / busbw in GB/s."""
    comm = store.select_events(lambda ev: ((ev["kind"] == "comm") & (ev["bytes"] > 0) & (ev["dur_ns"] > 0)
                                           & (ev["group_size"] > 1)).to_numpy())
    if comm.empty:
        return pd.DataFrame()
    rows = []
    keys = ["pg", "collective", "bytes", "group_size"]
    for key, g in comm.groupby(keys, observed=True):
        parts: tuple[Any, ...] = tuple(key) if isinstance(key, tuple) else (key,)
        pg, coll, size, n = str(parts[0]), str(parts[1]), int(parts[2]), int(parts[3])
        best = float(g["dur_ns"].quantile(threshold("bandwidth.best_quantile")))
        factor = bus_factor(str(coll), int(n))
        per_rank = g.groupby("rank")["dur_ns"].median()
        rows.append({"pg": str(pg), "collective": str(coll), "bytes": int(size), "group_size": int(n),
                     "calls": len(g), "ranks": int(g["rank"].nunique()), "best_ms": best / 1e6,
                     "median_ms": float(g["dur_ns"].median()) / 1e6,
                     "algbw_gbs": size / best, "busbw_gbs": size / best * factor,
                     "median_busbw_gbs": size / float(g["dur_ns"].median()) * factor, "factor": factor,
                     "slowest_rank": int(str(per_rank.idxmax())) if len(per_rank) else -1})
    return pd.DataFrame(rows).sort_values("bytes", ascending=False, ignore_index=True)


def _row(r: dict[Any, Any]) -> CollectiveRow:
    """A shape of `collective_bandwidth` as evidence, its times and bandwidths to 4 decimals."""
    return cast(CollectiveRow, {str(k): round(v, 4) if k in _ROUNDED else v for k, v in r.items()})


def _link_gbs_per_rank(analysis: Analysis) -> tuple[float, int]:
    """(NIC bandwidth per rank in GB/s, hosts) from the topology map and the ports' rates; (nan, hosts)."""
    rmap = analysis.view(rank_map_view)
    hosts = int(rmap["host"].replace("", pd.NA).nunique()) if not rmap.empty else 0
    c = analysis.store["counters"]
    rates = c[c["name"] == "rate_gbps"].groupby(["host", "device", "port"], observed=True)["value"].last()
    if rmap.empty or rates.empty:
        return float("nan"), hosts
    per_rank = []
    ranks = records(rmap)
    users = Counter((str(r["host"]), str(nic)) for r in ranks for nic in r["nics"])
    for r in ranks:
        total = 0.0
        for nic in r["nics"]:
            dev, _, port = str(nic).partition("/")
            rate = rates.get((r["host"], dev, port))
            if rate is not None:
                total += float(rate) / 8 / users[(str(r["host"]), str(nic))]
        if total > 0:
            per_rank.append(total)
    return (min(per_rank) if per_rank else float("nan")), hosts


def analyze_bandwidth(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    table = collective_bandwidth(store)
    if table.empty:
        return []
    link, hosts = _link_gbs_per_rank(analysis)
    rows = [_row(r) for r in table.head(32).to_dict("records")]
    top = table.iloc[0]
    findings = [Finding(
        analyzer="bandwidth", severity=Severity.INFO,
        title=(f"Largest collective {top['collective']} of {top['bytes'] / 2**20:.1f} MiB over {top['group_size']} "
               f"ranks reaches {top['busbw_gbs']:.1f} GB/s bus bandwidth"
               + (f" ({100 * top['busbw_gbs'] / link:.0f}% of {link:.1f} GB/s NIC bandwidth per rank)"
                  if link == link and hosts > 1 else "")),
        recommendation="Context: bus bandwidth is comparable with the link rate and with nccl-tests.",
        evidence=BandwidthEvidence(collectives=rows, nic_gbs_per_rank=None if link != link else round(link, 3),
                                   hosts=hosts, best_quantile=threshold("bandwidth.best_quantile")),
        key="bandwidth:table")]
    if link == link and hosts > 1:
        slow = table[(table["bytes"] >= threshold_int("bandwidth.min_bytes")) & (table["busbw_gbs"] < threshold("bandwidth.low_share") * link)]
        if not slow.empty:
            s = slow.iloc[0]
            findings.append(Finding(
                analyzer="bandwidth", severity=Severity.WARNING,
                title=(f"{len(slow)} large collective shape(s) reach under {100 * threshold('bandwidth.low_share'):.0f}% of the NIC "
                       f"bandwidth: {s['collective']} of {s['bytes'] / 2**20:.1f} MiB at {s['busbw_gbs']:.1f} GB/s "
                       f"bus bandwidth against {link:.1f} GB/s per rank"),
                recommendation="Large collectives should approach the link rate: check the RDMA findings of the "
                "hosts involved (congestion, idle rails, errors), the NCCL transport (a fallback to sockets) and "
                "NCCL_IB_HCA.",
                evidence=BandwidthEvidence(slow=[_row(r) for r in slow.head(16).to_dict("records")],
                                           nic_gbs_per_rank=round(link, 3), low_share=threshold("bandwidth.low_share"),
                                           min_bytes=threshold_int("bandwidth.min_bytes")),
                ranks=tuple(sorted(set(int(x) for x in store.select_events(
                    lambda ev: (ev["kind"] == "comm").to_numpy(), ["rank"], ["kind", "rank"])["rank"].unique()))),
                key="bandwidth:slow"))
    return findings
