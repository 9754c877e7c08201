"""The timeline view: one representative step per rank, as boxes per lane, small enough for hundreds of ranks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.ranks.focus import rank_focus_view
from perftracker.analyzers.traces.gpu_time import as_int

MAX_TIMELINE_RANKS = 16
MAX_BOXES_PER_LANE = 300
FOCUS_SLOWEST = 3  # of many ranks, the timeline shows the 3 slowest, the slowest one's peers and the median
FOCUS_PEERS = 4
COLUMNS = ["rank", "lane", "kind", "name", "start_ms", "dur_ms"]


def pick_ranks(ranks: list[int], durations: pd.Series, focus: pd.DataFrame | None = None) -> list[int]:
    """All ranks when few; else the `focus` ranks among `ranks` (the FOCUS_SLOWEST slowest, FOCUS_PEERS peers,
    the median); without them the 3 fastest, the 5 slowest and a spread between, by `durations`."""
    if len(ranks) <= MAX_TIMELINE_RANKS:
        return ranks
    if focus is not None and not focus.empty:
        keep = ((focus["role"] == "slowest") & (focus["order"] <= FOCUS_SLOWEST)) | (focus["role"] == "median") \
            | (focus["role"].isin(["host peer", "rank neighbour"]) & (focus["order"] <= FOCUS_PEERS))
        present = set(ranks)
        chosen = [int(r) for r in focus.loc[keep, "rank"] if int(r) in present]
        if chosen:
            return sorted(chosen)
    ordered = list(durations.sort_values().index)
    picks = set(ordered[:3] + ordered[-5:])
    for i in np.linspace(0, len(ordered) - 1, MAX_TIMELINE_RANKS - len(picks)).astype(int):
        picks.add(ordered[i])
    return sorted(int(r) for r in picks)[:MAX_TIMELINE_RANKS]


def timeline_view(analysis: Analysis) -> pd.DataFrame:
    """Boxes (rank, lane, kind, name, start_ms, dur_ms) of one representative step per rank."""
    store = analysis.store
    steps = store.steps[store.steps["source"] == "profiler"]
    if not store.n_events or steps.empty:
        return pd.DataFrame(columns=COLUMNS)
    common = steps.groupby("step")["dur_ns"].median()
    step = as_int((common - common.median()).abs().idxmin())
    per_rank = steps[steps["step"] == step].drop_duplicates("rank").set_index("rank")
    ranks = sorted(int(r) for r in per_rank.index)
    chosen = pick_ranks(ranks, per_rank["dur_ns"],
                        analysis.view(rank_focus_view) if len(ranks) > MAX_TIMELINE_RANKS else None)
    rows = []
    for rank in chosen:
        start = as_int(per_rank.loc[rank, "start_ns"])
        mine = store.rank_events(rank)
        sub = mine[(mine["rank"] == rank) & (mine["step"] == step) & (mine["kind"] != "annotation")]
        if sub.empty:
            continue
        lanes = np.where(sub["stream"] >= 0, "GPU stream " + sub["stream"].astype(str),
                         "CPU " + sub["kind"].astype(str))
        sub = sub.assign(lane=lanes)
        for lane, group in sub.groupby("lane"):
            rows.append(_merge_lane(group, rank, str(lane), start))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=COLUMNS)


def _merge_lane(group: pd.DataFrame, rank: int, lane: str, origin: int) -> pd.DataFrame:
    group = group.sort_values("start_ns")
    if len(group) > MAX_BOXES_PER_LANE:  # keep the longest boxes: they carry the time
        group = group.nlargest(MAX_BOXES_PER_LANE, "dur_ns").sort_values("start_ns")
    return pd.DataFrame({
        "rank": rank, "lane": lane, "kind": group["kind"].astype(str).to_numpy(),
        "name": group["name"].astype(str).str.slice(0, 120).to_numpy(),
        "start_ms": (group["start_ns"].to_numpy() - origin) / 1e6, "dur_ms": group["dur_ns"].to_numpy() / 1e6,
    })
