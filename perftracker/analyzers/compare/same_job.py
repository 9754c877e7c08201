"""Are the two sides of a diff runs of one job? Only then is "beyond the noise" a meaningful answer.

`job_difference(base, new)` is "" when nothing shows the two runs are of different jobs, else the difference
in words.
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.compare.side import RunSide
from perftracker.analyzers.thresholds import threshold


def _ranks(side: RunSide) -> int:
    for frame in (side.steps, side.op_totals):
        if not frame.empty and "rank" in frame:
            return int(pd.Series(frame["rank"]).nunique())
    return 0


def _shared_time(base: RunSide, new: RunSide) -> float | None:
    """The share of the op time, over both sides, spent in ops (kind, name) both sides run; None without ops."""
    sides = [side.op_totals for side in (base, new)]
    if any(frame.empty or not {"kind", "name", "total_ns"} <= set(frame.columns) for frame in sides):
        return None
    totals = [frame.groupby([frame["kind"].astype(str), frame["name"].astype(str)])["total_ns"].sum()
              for frame in sides]
    common = totals[0].index.intersection(totals[1].index)
    whole = float(totals[0].sum() + totals[1].sum())
    if whole <= 0:
        return None
    return float(totals[0].loc[common].sum() + totals[1].loc[common].sum()) / whole


def job_difference(base: RunSide, new: RunSide) -> str:
    """Why the two runs look like different jobs ("" when nothing says so)."""
    ranks = _ranks(base), _ranks(new)
    if all(ranks) and ranks[0] != ranks[1]:
        return f"the base run has {ranks[0]} ranks, the new run {ranks[1]}"
    world = [side.setting_values().get("WORLD_SIZE", frozenset()) for side in (base, new)]
    if all(len(w) == 1 for w in world) and world[0] != world[1]:
        return f"WORLD_SIZE is {next(iter(world[0]))} in the base run, {next(iter(world[1]))} in the new run"
    shared = _shared_time(base, new)
    if shared is not None and shared < threshold('diff.same_job_min_overlap'):
        return (f"only {100 * shared:.0f}% of their op time is in ops both runs have (another model or "
                "workload)")
    return ""
