"""The compact tables a report is drawn from, computed once from the Store and saved as Parquet.

They let `perftracker report` re-render without the raw traces, and keep the HTML small for
hundreds of ranks: the timeline shows one representative step, merges nearby boxes per lane and
draws at most MAX_TIMELINE_RANKS ranks (the slowest, the fastest and a spread between).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.steps import step_stats
from perftracker.analyzers.stragglers.straggler import lateness_by_step, rank_metrics, straggler_tables
from perftracker.analyzers.traces.gpu_time import as_int, breakdown, breakdown_per_step
from perftracker.analyzers.traces.idle import idle_gaps
from perftracker.store import Store

MAX_TIMELINE_RANKS = 16
MAX_BOXES_PER_LANE = 300
TABLE_NAMES = ("breakdown", "breakdown_steps", "step_stats", "steps", "timeline", "idle", "lateness", "rank_waits")


def build(analysis: Analysis) -> dict[str, pd.DataFrame]:
    store = analysis.store
    hta = analysis.options.hta_compat
    gaps = idle_gaps(store)
    idle = (gaps.groupby(["rank", "category"])["dur_ns"].sum().reset_index() if not gaps.empty
            else pd.DataFrame(columns=["rank", "category", "dur_ns"]))
    steps = store.steps[["rank", "window", "step", "start_ns", "dur_ns", "source"]].copy()
    arr, _ = straggler_tables(store)
    metrics = rank_metrics(arr, store)
    waits = (metrics[["share_last", "wait_per_step_s", "cost_per_step_s"]].reset_index() if not metrics.empty
             else pd.DataFrame(columns=["rank", "share_last", "wait_per_step_s", "cost_per_step_s"]))
    return {
        "lateness": lateness_by_step(arr),
        "rank_waits": waits,
        "breakdown": breakdown(store, hta_compat=hta),
        "breakdown_steps": breakdown_per_step(store),
        "step_stats": step_stats(store),
        "steps": steps,
        "timeline": timeline(store),
        "idle": idle,
    }


def save(tables: dict[str, pd.DataFrame], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():  # write then rename: a concurrent reader sees a whole file
        tmp = folder / f".{name}.{uuid.uuid4().hex}.parquet.tmp"
        frame.reset_index(drop=True).to_parquet(tmp, index=False)
        os.replace(tmp, folder / f"{name}.parquet")


def load(folder: Path) -> dict[str, pd.DataFrame]:
    tables = {}
    for name in TABLE_NAMES:
        path = folder / f"{name}.parquet"
        tables[name] = pd.read_parquet(path) if path.exists() else pd.DataFrame()
    return tables


def _pick_ranks(ranks: list[int], durations: pd.Series) -> list[int]:
    if len(ranks) <= MAX_TIMELINE_RANKS:
        return ranks
    ordered = list(durations.sort_values().index)
    picks = set(ordered[:3] + ordered[-5:])
    for i in np.linspace(0, len(ordered) - 1, MAX_TIMELINE_RANKS - len(picks)).astype(int):
        picks.add(ordered[i])
    return sorted(int(r) for r in picks)[:MAX_TIMELINE_RANKS]


def timeline(store: Store) -> pd.DataFrame:
    """Boxes (rank, lane, kind, name, start_ms, dur_ms) of one representative step per rank."""
    ev, steps = store.events, store.steps[store.steps["source"] == "profiler"]
    if ev.empty or steps.empty:
        return pd.DataFrame(columns=["rank", "lane", "kind", "name", "start_ms", "dur_ms"])
    common = steps.groupby("step")["dur_ns"].median()
    step = as_int((common - common.median()).abs().idxmin())
    per_rank = steps[steps["step"] == step].drop_duplicates("rank").set_index("rank")
    chosen = _pick_ranks(sorted(int(r) for r in per_rank.index), per_rank["dur_ns"])
    rows = []
    for rank in chosen:
        start = as_int(per_rank.loc[rank, "start_ns"])
        sub = ev[(ev["rank"] == rank) & (ev["step"] == step) & (ev["kind"] != "annotation")]
        if sub.empty:
            continue
        lanes = np.where(sub["stream"] >= 0, "GPU stream " + sub["stream"].astype(str),
                         "CPU " + sub["kind"].astype(str))
        sub = sub.assign(lane=lanes)
        for lane, group in sub.groupby("lane"):
            rows.append(_merge_lane(group, rank, str(lane), start))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def _merge_lane(group: pd.DataFrame, rank: int, lane: str, origin: int) -> pd.DataFrame:
    group = group.sort_values("start_ns")
    if len(group) > MAX_BOXES_PER_LANE:  # keep the longest boxes: they carry the time
        group = group.nlargest(MAX_BOXES_PER_LANE, "dur_ns").sort_values("start_ns")
    return pd.DataFrame({
        "rank": rank, "lane": lane, "kind": group["kind"].astype(str).to_numpy(),
        "name": group["name"].astype(str).str.slice(0, 120).to_numpy(),
        "start_ms": (group["start_ns"].to_numpy() - origin) / 1e6, "dur_ms": group["dur_ns"].to_numpy() / 1e6,
    })
