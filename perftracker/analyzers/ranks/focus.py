"""The ranks worth showing when there are too many to show all: the slowest, the slowest one's peers, the median."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.ranks.groups import rank_hosts
from perftracker.analyzers.stragglers.steps import step_stats_view
from perftracker.analyzers.stragglers.straggler import rank_metrics_view

TOP_K = 10
MAX_PEERS = 7
FOCUS_COLUMNS = ["rank", "role", "order", "host", "measure", "wait_cost_ms", "lateness_ms", "step_ms"]


def rank_measures(metrics: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Per rank (index): wait_cost_ms, lateness_ms, step_ms, from the straggler metrics and the step statistics."""
    parts = []
    if not metrics.empty:
        parts.append(pd.DataFrame({"wait_cost_ms": metrics["cost_per_step_s"] * 1e3,
                                   "lateness_ms": metrics["median_lateness_s"] * 1e3}, index=metrics.index))
    if not stats.empty:
        parts.append(pd.DataFrame({"step_ms": (stats["median_s"] * 1e3).to_numpy()},
                                  index=stats["rank"].to_numpy()))
    if not parts:
        return pd.DataFrame(columns=["wait_cost_ms", "lateness_ms", "step_ms"])
    table = pd.concat(parts, axis=1)
    table.index = table.index.astype(np.int64)
    for column in ("wait_cost_ms", "lateness_ms", "step_ms"):
        if column not in table.columns:
            table[column] = np.nan
    return table[["wait_cost_ms", "lateness_ms", "step_ms"]].sort_index()


def focus_ranks(measures: pd.DataFrame, hosts: Mapping[int, str], top_k: int = TOP_K,
                max_peers: int = MAX_PEERS) -> pd.DataFrame:
    """The focus table (docs/internals/analyzers.md) of per-rank `measures` (`rank_measures`)."""
    if measures.empty:
        return pd.DataFrame(columns=FOCUS_COLUMNS)
    if measures["wait_cost_ms"].notna().any():
        measure, keys = "wait_cost_ms", ["wait_cost_ms", "lateness_ms"]
    else:
        measure, keys = "step_ms", ["step_ms"]
    usable = measures[measures[measure].notna()].rename_axis("rank").reset_index()
    order = usable.sort_values([*keys, "rank"], ascending=[*([False] * len(keys)), True], kind="stable")
    ranked = [int(r) for r in order["rank"]]
    picks: list[tuple[int, str, int]] = [(r, "slowest", i + 1) for i, r in enumerate(ranked[:top_k])]
    if ranked:
        picks += [(r, role, i + 1) for i, (r, role) in enumerate(_peers(ranked[0], ranked, hosts, max_peers))]
        median = ranked[len(ranked) // 2]
        if median not in {p[0] for p in picks}:
            picks.append((median, "median", 1))
    lookup = measures.to_dict("index")
    seen: set[int] = set()
    rows = []
    for rank, role, number in picks:
        if rank in seen:
            continue
        seen.add(rank)
        values = {c: float(lookup[rank][c]) for c in ("wait_cost_ms", "lateness_ms", "step_ms")}
        rows.append({"rank": rank, "role": role, "order": number, "host": hosts.get(rank, ""), "measure": measure,
                     **values})
    return pd.DataFrame(rows, columns=FOCUS_COLUMNS)


def _peers(rank: int, ranks: list[int], hosts: Mapping[int, str], limit: int) -> list[tuple[int, str]]:
    host = hosts.get(rank, "")
    if host:
        mates = sorted((r for r in ranks if r != rank and hosts.get(r) == host), key=lambda r: (abs(r - rank), r))
        return [(r, "host peer") for r in mates[:limit]]
    present = set(ranks)
    return [(r, "rank neighbour") for r in (rank - 1, rank + 1) if r in present]


def rank_focus_view(analysis: Analysis) -> pd.DataFrame:
    """The run's focus ranks (`focus_ranks` of the straggler metrics and step statistics)."""
    measures = rank_measures(analysis.view(rank_metrics_view), analysis.view(step_stats_view))
    return focus_ranks(measures, rank_hosts(analysis))
