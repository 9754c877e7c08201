"""One side of a comparison: the step times, op totals, settings and findings of one run.

`RunSide` holds what `diff.compare_runs` needs of a run, already analyzed; `job_difference(base, new)` says why two
sides are not runs of one job ("" when nothing says so): only then is "beyond the noise" a meaningful answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.stragglers.degradation import job_series
from perftracker.analyzers.thresholds import threshold


@dataclass(frozen=True)
class RunSide:
    """What one run contributes to a comparison."""

    label: str
    steps: pd.DataFrame  # rank, window, step, start_ns, dur_ns, source
    op_totals: pd.DataFrame  # rank, kind, name, total_ns, count, steps
    settings: pd.DataFrame  # key, value, ranks, source
    findings: tuple[Finding, ...]

    def job_steps_s(self) -> np.ndarray:
        """The job's step time per step (median across ranks), in seconds, in step order (step files
        preferred, as for the step analyzers)."""
        if self.steps.empty:
            return np.array([], dtype=float)
        return job_series(self.steps).to_numpy(dtype=float)

    def ms_per_step(self) -> pd.DataFrame:
        """Per (rank, kind, name): milliseconds per profiled step (ranks without profiled steps left out)."""
        ops = self.op_totals
        if ops.empty:
            return pd.DataFrame(columns=["rank", "kind", "name", "ms"])
        ops = ops[ops["steps"] > 0]
        out = ops[["rank", "kind", "name"]].copy()
        out["ms"] = ops["total_ns"] / 1e6 / ops["steps"]
        return out.reset_index(drop=True)

    def setting_values(self) -> dict[str, frozenset[str]]:
        """key -> the set of values seen (over ranks and sources)."""
        if self.settings.empty:
            return {}
        return {str(k): frozenset(str(v) for v in g["value"]) for k, g in self.settings.groupby("key")}


def side_from_tables(label: str, tables: Mapping[str, pd.DataFrame], findings: list[Finding]) -> RunSide:
    """A RunSide from report tables (an analysis's or a saved folder's); missing tables are empty."""
    steps, ops, settings = (tables.get(name, pd.DataFrame()) for name in ("steps", "op_totals", "settings"))
    return RunSide(label, steps, ops, settings, tuple(findings))


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
