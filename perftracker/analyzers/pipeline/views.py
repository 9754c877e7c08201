"""The pipeline room's views: per rank and step measurements, per stage compute, and the report's DP x PP grid.

`stage_steps_view`, `stage_compute_view` (the lightest replica's compute per stage and step, from its ops) and
`layout_grid_view` (one row per worker).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.layout.views import parallel_layout_view
from perftracker.analyzers.pipeline.stage_steps import stage_steps
from perftracker.analyzers.stragglers.op_work import compute_trials

GRID_COLUMNS = ["rank", "dp", "pp", "tp", "step_ms", "busy_ms", "wait_ms", "cost_ms"]
COMPUTE_COLUMNS = ["stage", "step", "compute_ms", "microbatches", "replicas"]


def stage_steps_view(analysis: Analysis) -> pd.DataFrame:
    """`stage_steps` of the run (empty unless the layout has two or more pipeline stages)."""
    return stage_steps(analysis.store, analysis.view(parallel_layout_view))


def stage_compute_view(analysis: Analysis) -> pd.DataFrame:
    """Per (stage, step): the lightest replica's compute from its ops (ms), its micro-batches, the replicas seen."""
    rows = analysis.view(stage_steps_view)
    if rows.empty:
        return pd.DataFrame(columns=COMPUTE_COLUMNS)
    events = analysis.store.events
    events = events[events["rank"].isin(list(rows["rank"].unique())) & (events["step"] >= 0)]
    bounds = rows[["rank", "step", "p2p_end_ns", "phase_end_ns"]].drop_duplicates(["rank", "step"])
    window = events[["rank", "step"]].merge(bounds, on=["rank", "step"], how="left")  # one row per event, in order
    backward = _backward_ops(events["name"])
    start = events["start_ns"].to_numpy()
    inside = (start < window["p2p_end_ns"].to_numpy()) | (backward & (start < window["phase_end_ns"].to_numpy()))
    trials = compute_trials(events[inside])
    if trials.empty:
        return pd.DataFrame(columns=COMPUTE_COLUMNS)
    steps = sorted(int(s) for s in events.loc[events["step"] >= 0, "step"].unique())
    trials = trials.assign(step=trials["trial"].map(dict(enumerate(steps))))
    joined = rows.merge(trials[["rank", "step", "value"]], on=["rank", "step"], how="inner")
    grouped = joined.groupby(["stage", "step"])
    out = pd.DataFrame({"compute_ms": grouped["value"].min() / 1e6, "microbatches": grouped["microbatches"].max(),
                        "replicas": grouped["rank"].nunique()}).reset_index()
    return out[COMPUTE_COLUMNS]


def _backward_ops(names: pd.Series) -> np.ndarray:
    """Which events are autograd's backward ops, judged once per distinct name (the column is a category)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        text = names.astype(str)
        return (text.str.startswith("autograd::") | text.str.contains("Backward", regex=False)).to_numpy()
    cats = pd.Series(names.cat.categories.astype(str))
    hit = (cats.str.startswith("autograd::") | cats.str.contains("Backward", regex=False)).to_numpy()
    codes = names.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.clip(codes, 0, None)] if len(hit) else False, False)


def layout_grid_view(analysis: Analysis) -> pd.DataFrame:
    """One row per worker of a pipeline job: its place (dp, pp, tp), its median step, busy and wait time over the
    profiled steps (ms), and cost_ms, its busy time beyond the median worker's."""
    rows = analysis.view(stage_steps_view)
    if rows.empty:
        return pd.DataFrame(columns=GRID_COLUMNS)
    layout = analysis.view(parallel_layout_view)
    per = rows.assign(wait_ms=rows["recv_wait_ms"] + rows["coll_wait_ms"]).groupby("rank")[
        ["step_ms", "busy_ms", "wait_ms"]].median().reset_index()
    per["dp"] = [layout.coords[int(r)].get("dp", 0) for r in per["rank"]]
    per["pp"] = [layout.coords[int(r)].get("pp", 0) for r in per["rank"]]
    per["tp"] = [layout.coords[int(r)].get("tp", 0) for r in per["rank"]]
    per["cost_ms"] = (per["busy_ms"] - per["busy_ms"].median()).clip(lower=0.0)
    return per[GRID_COLUMNS].round(3)
