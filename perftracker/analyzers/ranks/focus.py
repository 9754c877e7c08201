"""The ranks worth showing when there are too many to show all (the slowest, its peers, the median), and spreads.

`lateness_groups_view` (lateness binned by rank group and step) and `step_spread_view` (step time per step across
ranks) are empty unless the run has many ranks (`rank_layout_view`), where one row per rank would be unreadable.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import preferred
from perftracker.analyzers.ranks.groups import rank_groups_view, rank_hosts, rank_layout_view
from perftracker.analyzers.stragglers.steps import step_series_view, step_stats_view
from perftracker.analyzers.stragglers.straggler import lateness_view, rank_metrics_view

TOP_K = 10
MAX_PEERS = 7
FOCUS_COLUMNS = ["rank", "role", "order", "host", "measure", "wait_cost_ms", "lateness_ms", "step_ms"]
GROUP_LATENESS_COLUMNS = ["group", "group_label", "step", "ranks", "median_ms", "max_ms", "max_rank"]
STEP_SPREAD_COLUMNS = ["step", "ranks", "median_ms", "p90_ms", "min_ms", "max_ms", "max_rank"]


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
    return table.reindex(columns=["wait_cost_ms", "lateness_ms", "step_ms"]).sort_index()


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


def _many(analysis: Analysis) -> bool:
    return bool(analysis.view(rank_layout_view)["many"].iloc[0])


def binned(values: pd.DataFrame, groups: pd.DataFrame, value: str, by: str) -> pd.DataFrame:
    """Per (group, `by`): ranks, median and max of `value` and the rank at the max (`values`: rank, `by`, `value`)."""
    if values.empty or groups.empty:
        return pd.DataFrame(columns=["group", "group_label", by, "ranks", "median_ms", "max_ms", "max_rank"])
    joined = values.dropna(subset=[value]).merge(groups[["rank", "group", "group_label"]], on="rank", how="inner")
    if joined.empty:
        return pd.DataFrame(columns=["group", "group_label", by, "ranks", "median_ms", "max_ms", "max_rank"])
    grouped = joined.groupby(["group", by], sort=True)
    at_max = joined.loc[grouped[value].idxmax(), ["group", by, "rank"]].set_index(["group", by])["rank"]
    table = pd.DataFrame({"group_label": grouped["group_label"].first(), "ranks": grouped["rank"].nunique(),
                          "median_ms": grouped[value].median(), "max_ms": grouped[value].max(),
                          "max_rank": at_max})
    return table.reset_index().astype({"group": np.int64, by: np.int64, "ranks": np.int64, "max_rank": np.int64})


def lateness_groups_view(analysis: Analysis) -> pd.DataFrame:
    """Median and max lateness per rank group and step, empty unless ranks are many."""
    if not _many(analysis):
        return pd.DataFrame(columns=GROUP_LATENESS_COLUMNS)
    lateness = binned(analysis.view(lateness_view), analysis.view(rank_groups_view), "lateness_ms", "step")
    return lateness[GROUP_LATENESS_COLUMNS]


def step_spread_view(analysis: Analysis) -> pd.DataFrame:
    """Step time across ranks per step, empty unless ranks are many."""
    if not _many(analysis):
        return pd.DataFrame(columns=STEP_SPREAD_COLUMNS)
    return spread_over_steps(analysis.view(step_series_view))


def spread_over_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step across ranks: ranks, median, p90, min, max (ms), rank at the max (`steps`: the steps view)."""
    if steps.empty:
        return pd.DataFrame(columns=STEP_SPREAD_COLUMNS)
    use = preferred(steps, "stepfile").assign(ms=lambda t: t["dur_ns"] / 1e6)
    grouped = use.groupby("step", sort=True)
    at_max = use.loc[grouped["ms"].idxmax(), ["step", "rank"]].set_index("step")["rank"]
    table = pd.DataFrame({"ranks": grouped["rank"].nunique(), "median_ms": grouped["ms"].median(),
                          "p90_ms": grouped["ms"].quantile(0.9), "min_ms": grouped["ms"].min(),
                          "max_ms": grouped["ms"].max(), "max_rank": at_max})
    return table.reset_index().astype({"step": np.int64, "ranks": np.int64, "max_rank": np.int64})[STEP_SPREAD_COLUMNS]
