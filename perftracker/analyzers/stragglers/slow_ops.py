"""Op-by-op comparison of one rank with its peers, ranked by the total extra time per step.

`op_steps_view` (per rank and op: time per step, instances, p90) and `slower_ops(analysis, rank)` (the ops whose
time per step exceeds the peers' median the most).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.grouping import Groups, codes_of, value_test
from perftracker.analyzers.traces.per_rank import by_rank

_KINDS = ("compute", "memcpy", "memset", "cpu_op", "annotation", "gpu_annotation")
COLUMNS = ["rank", "name", "kind", "per_step_ns", "count_per_step", "p90_ns"]


def op_steps_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank and op name: kind, time and instances per step, p90 duration (docs/internals/stepgraph.md);
    computed a few ranks at a time over their own events (`per_rank.by_rank`)."""
    store = analysis.store
    is_step = value_test(store.events_schema(["name"])["name"], lambda name: name.startswith("ProfilerStep#"))

    def one_chunk(_: list[int], ev: pd.DataFrame) -> pd.DataFrame:
        return _op_steps(ev[ev["kind"].isin(_KINDS).to_numpy() & ~is_step(ev["name"])])

    return by_rank(store, one_chunk)


def _op_steps(ev: pd.DataFrame) -> pd.DataFrame:
    if ev.empty:
        return pd.DataFrame(columns=COLUMNS)
    in_step = ev["step"] >= 0
    stepped = ev.loc[in_step, "rank"].unique()
    ev = ev[in_step | ~ev["rank"].isin(stepped)]  # a rank with steps: only what ran inside them
    steps = ev[ev["step"] >= 0].groupby("rank")["step"].nunique()
    name, names = codes_of(ev["name"])
    kind, kinds = codes_of(ev["kind"])
    rank = ev["rank"].to_numpy(np.int64)
    groups = Groups.of(rank, name)
    dur = ev["dur_ns"].to_numpy(np.int64)
    n_steps = steps.reindex(rank[groups.first]).fillna(1).clip(lower=1).to_numpy(np.float64)
    return pd.DataFrame({"rank": rank[groups.first], "name": np.array(names, dtype=object)[name[groups.first]],
                         "kind": np.array(kinds, dtype=object)[kind[groups.first]],
                         "per_step_ns": groups.sum(dur) / n_steps, "count_per_step": groups.count() / n_steps,
                         "p90_ns": groups.quantile(dur, 0.9)})


def slower_ops(analysis: Analysis, rank: int, limit: int = 8) -> list[dict[str, Any]]:
    """Ops whose time per step on `rank` exceeds the peers' median the most (extra time per step, largest first)."""
    table = analysis.view(op_steps_view)
    if table.empty or table["rank"].nunique() < 2:
        return []
    mine = table[table["rank"] == rank].set_index("name")
    peers = table[table["rank"] != rank].groupby("name")[["per_step_ns", "p90_ns"]].median()
    joined = mine.join(peers.add_suffix("_peers"), how="left").fillna({"per_step_ns_peers": 0.0, "p90_ns_peers": 0.0})
    joined["excess"] = joined["per_step_ns"] - joined["per_step_ns_peers"]
    positive = joined[joined["excess"] > 0]
    if positive.empty:
        return []
    floor = threshold("slow_ops.min_excess_share") * float(positive["excess"].sum())
    top = positive[positive["excess"] >= floor].sort_values("excess", ascending=False, kind="stable").head(limit)
    return [{"name": str(name)[:160], "kind": str(r["kind"]),
             "extra_ms_per_step": round(float(r["excess"]) / 1e6, 3),
             "ms_per_step": round(float(r["per_step_ns"]) / 1e6, 3),
             "peers_ms_per_step": round(float(r["per_step_ns_peers"]) / 1e6, 3),
             "count_per_step": round(float(r["count_per_step"]), 2),
             "p90_ms": round(float(r["p90_ns"]) / 1e6, 3), "peers_p90_ms": round(float(r["p90_ns_peers"]) / 1e6, 3)}
            for name, r in top.iterrows()]
