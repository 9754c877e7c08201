"""How much compute each rank ran in each profiled step, from its ops, not from the clock between collectives.

`compute_trials(events)`: per (trial, rank), the GPU compute-kernel time, or on CPU-only traces each CPU op at its
shortest own time anywhere (which a shared CPU's scheduling does not stretch). Op by op against the peers:
`op_steps_view` (per rank and op: time per step, instances, p90) and `slower_ops(analysis, rank)` (the ops whose time
per step exceeds the peers' median the most).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.grouping import Groups, codes_of, value_test
from perftracker.analyzers.traces.per_rank import by_rank
from perftracker.evidence.steps import SlowerOpRow

COLUMNS = ["trial", "rank", "value"]
COST_COLUMNS = ["step", "rank", "source", "key", "count", "min_ns", "sum_ns"]
_KINDS = ("compute", "memcpy", "memset", "cpu_op", "annotation", "gpu_annotation")
OP_STEP_COLUMNS = ["rank", "name", "kind", "per_step_ns", "count_per_step", "p90_ns"]


def compute_trials(events: pd.DataFrame) -> pd.DataFrame:
    """Per (trial, rank): the rank's compute in one profiled step (ns); trial numbers the steps in order."""
    return trials_of(op_costs(events))


def op_costs(events: pd.DataFrame) -> pd.DataFrame:
    """Per (step, rank, source, key): the ops' count, shortest own time and summed time (ns). `source` is "gpu"
    (compute kernels, one row per step and rank, key "") or "cpu" (CPU ops, key: name and input shapes).
    Computed over any subset of the ranks' events: `trials_of` combines the subsets."""
    inside = events[(events["step"] >= 0).to_numpy() & events["kind"].isin(["compute", "cpu_op"]).to_numpy()]
    gpu = inside[inside["kind"] == "compute"]
    ops = inside[inside["kind"] == "cpu_op"]
    dims = ops["input_dims"].astype(str) if "input_dims" in ops else pd.Series("", index=ops.index)
    parts = []
    for source, rows, key, own in (("gpu", gpu, "", gpu["dur_ns"].to_numpy()),
                                   ("cpu", ops, (ops["name"].astype(str) + "|" + dims).to_numpy(), self_times(ops))):
        if rows.empty:
            continue
        frame = pd.DataFrame({"step": rows["step"].to_numpy(), "rank": rows["rank"].to_numpy(), "key": key, "own": own})
        c = frame.groupby(["step", "rank", "key"])["own"].agg(["size", "min", "sum"]).reset_index()
        parts.append(pd.DataFrame({"step": c["step"], "rank": c["rank"], "source": source, "key": c["key"],
                                   "count": c["size"], "min_ns": c["min"], "sum_ns": c["sum"]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COST_COLUMNS)


def trials_of(costs: pd.DataFrame) -> pd.DataFrame:
    """`compute_trials` from `op_costs` of all the ranks (concatenated): GPU kernel time where any rank has compute
    kernels, else each CPU op counted at its shortest own time anywhere."""
    if costs.empty:
        return pd.DataFrame(columns=COLUMNS)
    gpu = costs[costs["source"] == "gpu"]
    if not gpu.empty:
        per = gpu.groupby(["step", "rank"])["sum_ns"].sum().astype(np.float64).reset_index(name="value")
    else:
        cpu = costs[costs["source"] == "cpu"]
        cost = cpu["min_ns"].groupby(cpu["key"]).transform("min").astype(np.float64)
        per = cpu.assign(value=cost * cpu["count"]).groupby(["step", "rank"])["value"].sum().reset_index()
    steps = sorted(per["step"].unique())
    per["trial"] = per["step"].map({s: i for i, s in enumerate(steps)})
    return per[COLUMNS].reset_index(drop=True)


def self_times(ops: pd.DataFrame) -> np.ndarray:
    """Each op's own time (ns): its duration less its direct children's (the ops it holds on its thread)."""
    order = ops.sort_values(["rank", "tid", "start_ns", "dur_ns"], ascending=[True, True, True, False], kind="stable")
    starts = order["start_ns"].to_numpy(np.int64).tolist()  # lists: the loop below reads numpy scalars ~3x slower
    ends = (order["start_ns"].to_numpy(np.int64) + order["dur_ns"].to_numpy(np.int64)).tolist()
    lanes = (order["rank"].astype(str) + ":" + order["tid"].astype(str)).tolist()
    own = order["dur_ns"].to_numpy(np.float64).copy()
    stack: list[int] = []
    for i in range(len(order)):
        if i and lanes[i] != lanes[i - 1]:
            stack.clear()
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        if stack:
            own[stack[-1]] -= ends[i] - starts[i]
        stack.append(i)
    out = pd.Series(np.clip(own, 0.0, None), index=order.index)
    return out.reindex(ops.index).to_numpy()


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
        return pd.DataFrame(columns=OP_STEP_COLUMNS)
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


def slower_ops(analysis: Analysis, rank: int, limit: int = 8) -> list[SlowerOpRow]:
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
