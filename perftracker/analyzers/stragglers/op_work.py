"""How much compute each rank ran in each profiled step, from its ops, not from the clock between collectives.

`compute_trials(events)`: per (trial, rank), the GPU compute-kernel time, or on CPU-only traces each CPU op at its
shortest own time anywhere (which a shared CPU's scheduling does not stretch). Nothing here judges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["trial", "rank", "value"]
COST_COLUMNS = ["step", "rank", "source", "key", "count", "min_ns", "sum_ns"]


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
    parts = []
    if not gpu.empty:
        g = gpu.groupby(["step", "rank"])["dur_ns"].agg(["size", "min", "sum"]).reset_index()
        parts.append(pd.DataFrame({"step": g["step"], "rank": g["rank"], "source": "gpu", "key": "",
                                   "count": g["size"], "min_ns": g["min"], "sum_ns": g["sum"]}))
    if not ops.empty:
        dims = ops["input_dims"].astype(str) if "input_dims" in ops else pd.Series("", index=ops.index)
        frame = pd.DataFrame({"step": ops["step"].to_numpy(), "rank": ops["rank"].to_numpy(),
                              "key": (ops["name"].astype(str) + "|" + dims).to_numpy(), "own": self_times(ops)})
        c = frame.groupby(["step", "rank", "key"])["own"].agg(["size", "min", "sum"]).reset_index()
        parts.append(pd.DataFrame({"step": c["step"], "rank": c["rank"], "source": "cpu", "key": c["key"],
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
    starts = order["start_ns"].to_numpy(np.int64)
    ends = starts + order["dur_ns"].to_numpy(np.int64)
    lanes = (order["rank"].astype(str) + ":" + order["tid"].astype(str)).to_numpy()
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
