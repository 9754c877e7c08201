"""Spreads across many ranks: lateness binned by rank group and step, step time per step across ranks.

Both views are empty unless the run has many ranks (`rank_layout_view`), where one row per rank would be
unreadable.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.ranks.groups import rank_groups_view, rank_layout_view
from perftracker.analyzers.stragglers.steps import step_series_view
from perftracker.analyzers.stragglers.straggler import lateness_view

GROUP_LATENESS_COLUMNS = ["group", "group_label", "step", "ranks", "median_ms", "max_ms", "max_rank"]
STEP_SPREAD_COLUMNS = ["step", "ranks", "median_ms", "p90_ms", "min_ms", "max_ms", "max_rank"]


def _many(analysis: Analysis) -> bool:
    layout = analysis.view(rank_layout_view)
    return bool(layout["many"].iloc[0])


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
    lateness = analysis.view(lateness_view)
    return binned(lateness, analysis.view(rank_groups_view), "lateness_ms", "step")[GROUP_LATENESS_COLUMNS] \
        if not lateness.empty else pd.DataFrame(columns=GROUP_LATENESS_COLUMNS)


def step_spread_view(analysis: Analysis) -> pd.DataFrame:
    """Step time across ranks per step, empty unless ranks are many."""
    steps = analysis.view(step_series_view)
    if steps.empty or not _many(analysis):
        return pd.DataFrame(columns=STEP_SPREAD_COLUMNS)
    return spread_over_steps(steps)


def spread_over_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step across ranks: ranks, median, p90, min, max (ms), rank at the max (`steps`: the steps view)."""
    if steps.empty:
        return pd.DataFrame(columns=STEP_SPREAD_COLUMNS)
    files = steps[steps["source"] == "stepfile"]
    use = (files if not files.empty else steps).assign(ms=lambda t: t["dur_ns"] / 1e6)
    grouped = use.groupby("step", sort=True)
    at_max = use.loc[grouped["ms"].idxmax(), ["step", "rank"]].set_index("step")["rank"]
    table = pd.DataFrame({"ranks": grouped["rank"].nunique(), "median_ms": grouped["ms"].median(),
                          "p90_ms": grouped["ms"].quantile(0.9), "min_ms": grouped["ms"].min(),
                          "max_ms": grouped["ms"].max(), "max_rank": at_max})
    return table.reset_index().astype({"step": np.int64, "ranks": np.int64, "max_rank": np.int64})[STEP_SPREAD_COLUMNS]
