"""GPU time inside each cost period, so that every cost is a share of the time it was measured in.

`period_costs_view(analysis)` has one row per rank window and period (`periods.cost_periods`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.gpu_time import as_int, work_sets
from perftracker.analyzers.traces.intervals import covered_within, intersect, union
from perftracker.analyzers.traces.periods import Basis, basis_of, cost_periods_view, cost_work_view

Ints = npt.NDArray[np.int64]
QUANTITIES = ("busy_ns", "idle_ns", "compute_ns", "comm_ns", "comm_hidden_ns", "comm_exposed_ns",
              "memory_exposed_ns", "ep_comm_ns", "ep_hidden_ns", "wait_ns", "wait_exposed_ns")
COLUMNS = ["rank", "window", "period", "dur_ns", *QUANTITIES]
LIBRARY_COLUMNS = ["rank", "family", "comm_ns", "hidden_ns", "periods", "dur_ns"]


def _set(group: pd.DataFrame, mask: npt.NDArray[np.bool_] | None = None) -> tuple[Ints, Ints]:
    s = group["start_ns"].to_numpy(np.int64)
    e = group["end_ns"].to_numpy(np.int64)
    return union(s, e) if mask is None else union(s[mask], e[mask])


def _windows(work: pd.DataFrame, periods: pd.DataFrame) -> Iterator[tuple[Any, Any, pd.DataFrame, pd.DataFrame]]:
    """(rank, window, its periods, its GPU work) of every rank window with both."""
    grouped = dict(iter(work.groupby(["rank", "window"], sort=True, observed=True)))
    for (rank, window), mine in periods.groupby(["rank", "window"], sort=True):
        if (rank, window) in grouped:
            yield rank, window, mine, grouped[(rank, window)]


def period_costs(work: pd.DataFrame, periods: pd.DataFrame, expert_parallel: frozenset[str]) -> pd.DataFrame:
    """Per rank window and period, the GPU time of each kind inside the period (docs/internals/analyzers.md)."""
    if work.empty or periods.empty:
        return pd.DataFrame(columns=COLUMNS)
    frames = []
    for rank, window, mine, group in _windows(work, periods):
        sets = work_sets(group)
        family = group["comm_family"].astype(str).to_numpy()
        sets["ep_comm"] = _set(group, (group["klass"] == "comm").to_numpy() & np.isin(family, list(expert_parallel)))
        sets["ep_hidden"] = intersect(*sets["ep_comm"], *sets["compute"])
        lo, hi = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        dur = np.maximum(hi - lo, 0)
        inside = {f"{name}_ns": covered_within(*sets[key], lo, hi) for name, key in (
            ("busy", "busy"), ("compute", "compute"), ("comm", "comm"), ("comm_hidden", "hidden"),
            ("ep_comm", "ep_comm"), ("ep_hidden", "ep_hidden"), ("wait", "wait"))}
        exposed = inside["comm_ns"] - inside["comm_hidden_ns"]
        wait_exposed = covered_within(*sets["waiting"], lo, hi) - covered_within(*sets["working"], lo, hi)
        frames.append(pd.DataFrame({
            "rank": as_int(rank), "window": as_int(window), "period": mine["period"].to_numpy(), "dur_ns": dur,
            **inside, "idle_ns": dur - inside["busy_ns"], "comm_exposed_ns": exposed, "wait_exposed_ns": wait_exposed,
            "memory_exposed_ns": inside["busy_ns"] - inside["compute_ns"] - exposed - wait_exposed,
        }))
    return pd.concat(frames, ignore_index=True)[COLUMNS] if frames else pd.DataFrame(columns=COLUMNS)


def library_costs(work: pd.DataFrame, periods: pd.DataFrame) -> pd.DataFrame:
    """Per rank and communication library: its GPU time inside the periods, and the part under compute."""
    comm_rows = work[work["klass"] == "comm"]
    if comm_rows.empty or periods.empty:
        return pd.DataFrame(columns=LIBRARY_COLUMNS)
    rows = []
    for rank, _window, mine, group in _windows(work, periods):
        lo, hi = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        compute = _set(group, (group["klass"] == "compute").to_numpy())
        families = group["comm_family"].astype(str).to_numpy()
        comm_mask = (group["klass"] == "comm").to_numpy()
        for family in sorted(set(families[comm_mask])):
            own = _set(group, comm_mask & (families == family))
            rows.append({"rank": as_int(rank), "family": family or "unnamed",
                         "comm_ns": int(covered_within(*own, lo, hi).sum()),
                         "hidden_ns": int(covered_within(*intersect(*own, *compute), lo, hi).sum()),
                         "periods": len(mine), "dur_ns": int(np.maximum(hi - lo, 0).sum())})
    if not rows:
        return pd.DataFrame(columns=LIBRARY_COLUMNS)
    return pd.DataFrame(rows).groupby(["rank", "family"], as_index=False).sum()[LIBRARY_COLUMNS]


def per_period(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """`rank_costs_view` rows with `column` as seconds per period (`per_period_s`) and as a share of the
    periods' time (`share`, 0 to 1)."""
    out = table.copy()
    out["per_period_s"] = out[column] / out["periods"].clip(lower=1) / 1e9
    out["share"] = (out[column] / out["dur_ns"].where(out["dur_ns"] > 0)).fillna(0.0).astype(float)
    return out


def basis_row(row: pd.Series) -> Basis:
    """The `Basis` of one `rank_costs_view` row."""
    return Basis(str(row["basis"]), str(row["clock"]), str(row["marker"]))


def period_costs_view(analysis: Analysis) -> pd.DataFrame:
    """The GPU time of each kind inside every cost period (docs/internals/analyzers.md)."""
    expert_parallel = frozenset(name for name, info in analysis.store.run_info.comm_libraries.items()
                                if info.get("expert_parallel"))
    return period_costs(analysis.view(cost_work_view), analysis.view(cost_periods_view), expert_parallel)


def rank_costs_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank: periods, dur_ns and every quantity summed over its periods, with basis, clock and marker."""
    costs = analysis.view(period_costs_view)
    if costs.empty:
        return pd.DataFrame(columns=["rank", "periods", "dur_ns", *QUANTITIES, "basis", "clock", "marker"])
    table = costs.groupby("rank").agg(periods=("period", "size"), dur_ns=("dur_ns", "sum"),
                                      **{q: (q, "sum") for q in QUANTITIES}).reset_index()
    bases = basis_of(analysis.view(cost_periods_view))
    return table.assign(**{f: [getattr(bases[as_int(r)], f) for r in table["rank"]] for f in ("basis", "clock", "marker")})


def comm_library_costs_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank and communication library: comm_ns and hidden_ns inside the cost periods."""
    return library_costs(analysis.view(cost_work_view), analysis.view(cost_periods_view))
