"""The CPU side of a trace as call trees: each CPU event's parent, its self time, and the op it runs in.

`cpu_calls(store)` (once per analysis: `cpu_calls_view`): one row per CPU event with its parent, self time and
op. `top_level(events)` marks the CPU events not nested in another event of their thread.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.grouping import per_value, value_test
from perftracker.analyzers.traces.per_rank import by_rank
from perftracker.store import Store

CPU_KINDS = ("cpu_op", "annotation", "collective_cpu", "runtime")
COLUMNS = ["rank", "window", "tid", "kind", "name", "start_ns", "dur_ns", "step", "correlation"]
Ints = npt.NDArray[np.int64]


def cpu_calls(store: Store) -> pd.DataFrame:
    """Every CPU event with its parent, self time and op (rows of the whole table; docs/internals/analyzers.md),
    computed a few ranks at a time (`per_rank.by_rank`: a call's parent and op are of its own rank)."""
    offset = 0
    is_step = value_test(store.events_schema(["name"])["name"], _is_profiler_step)

    def one_chunk(ranks: list[int], ev: pd.DataFrame) -> pd.DataFrame:
        nonlocal offset
        calls = rank_calls(ev, is_step(ev["name"])).drop(columns="tid")  # the thread ordered the trees; no reader needs it
        if offset + len(calls) >= 2**31:
            raise ValueError(f"{offset + len(calls)} CPU calls: more than row numbers of int32 can name")
        for column in ("parent", "op"):
            rows = calls[column].to_numpy()
            calls[column] = np.where(rows >= 0, rows + offset, -1).astype(np.int32)  # rows: int32 halves them
        offset += len(calls)
        return calls

    return by_rank(store, one_chunk)  # a fresh 0..n-1 index: the offsets above


def _is_profiler_step(name: str) -> bool:
    return name.startswith("ProfilerStep#")


def rank_calls(ev: pd.DataFrame, is_step: npt.NDArray[np.bool_] | None = None) -> pd.DataFrame:
    """`cpu_calls` of some events (one rank's, normally), on a fresh 0..n-1 index (`is_step`: which of them
    are ProfilerStep markers, when already known)."""
    is_step = per_value(ev["name"], _is_profiler_step) if is_step is None else is_step
    keep = ev["kind"].isin(CPU_KINDS).to_numpy() & (ev["stream"].to_numpy() < 0) & ~is_step
    picked = ev.loc[keep, COLUMNS]
    start = picked["start_ns"].to_numpy(np.int64)
    end = start + picked["dur_ns"].to_numpy(np.int64)
    rank, window, tid = (picked[c].to_numpy(np.int64) for c in ("rank", "window", "tid"))
    order = np.lexsort((-end, start, tid, window, rank))  # by thread, then start, the longer first
    calls = picked.take(order).reset_index(drop=True)
    start, end = start[order], np.maximum(end[order], start[order] + 1)  # an instant still nests
    parent = np.full(len(calls), -1, dtype=np.int64)
    thread = np.stack([rank[order], window[order], tid[order]], axis=1)
    bounds = np.flatnonzero((thread[1:] != thread[:-1]).any(axis=1)) + 1 if len(calls) else np.empty(0, np.int64)
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(calls)]):
        local = _parents(start[lo:hi], end[lo:hi])
        parent[lo:hi] = np.where(local >= 0, local + lo, -1)
    dur = calls["dur_ns"].to_numpy(np.int64)
    nested = parent >= 0
    children = np.bincount(parent[nested], weights=dur[nested], minlength=len(calls))
    calls["parent"] = parent
    calls["self_ns"] = np.maximum(dur - children.astype(np.int64), 0)
    calls["op"] = _ops(parent, (calls["kind"] == "runtime").to_numpy())
    return calls


def _parents(start: Ints, end: Ints) -> Ints:
    """Parent of each interval of one thread (sorted by start, longer first), -1 at top level: the last earlier
    interval one level up (depth: the earlier ones still open at its start), if that one contains it."""
    n = len(start)
    position = np.arange(n, dtype=np.int64)
    depth = position - np.searchsorted(np.sort(end), start, side="right")
    keys = depth * n + position
    order = np.sort(keys)
    wanted = (depth - 1) * n + position
    at = np.searchsorted(order, wanted, side="left") - 1
    found = order[np.clip(at, 0, None)] if n else order
    candidate = found % n if n else found
    ok = (at >= 0) & (depth > 0) & (found // n == depth - 1)
    ok &= end[np.where(ok, candidate, 0)] >= end
    return np.where(ok, candidate, -1).astype(np.int64)


def _ops(parent: Ints, is_runtime: npt.NDArray[np.bool_]) -> Ints:
    """For each row, the innermost row containing it (itself included) that is not a runtime call."""
    op = np.arange(len(parent), dtype=np.int64)
    pending = is_runtime.copy()
    while pending.any():
        op[pending] = parent[op[pending]]
        pending &= op >= 0
        pending[pending] = is_runtime[op[pending]]
    return op


def cpu_calls_view(analysis: Analysis) -> pd.DataFrame:
    """The run's CPU call trees (see `cpu_calls`), shared by the op tables, the idle evidence and the kernels' ops."""
    return cpu_calls(analysis.store)


def launch_ops(calls: pd.DataFrame) -> pd.DataFrame:
    """rank, window, correlation, launched_by: the op that issued each launch (the call's own name outside ops),
    categorical, with the categories of `calls["name"]`."""
    launches = calls[(calls["kind"] == "runtime") & (calls["correlation"] >= 0)]
    names = calls["name"].astype("category")
    dtype = pd.CategoricalDtype(names.cat.categories)
    codes = names.cat.codes.to_numpy(np.int64)
    op = launches["op"].to_numpy(np.int64)
    own = codes[launches.index.to_numpy()]
    by = np.where(op >= 0, codes[np.clip(op, 0, None)] if len(codes) else own, own)
    out = pd.DataFrame({"rank": launches["rank"].to_numpy(), "window": launches["window"].to_numpy(),
                        "correlation": launches["correlation"].to_numpy(),
                        "launched_by": pd.Categorical.from_codes(by, dtype=dtype)})
    return out.drop_duplicates(["rank", "window", "correlation"])


def top_level(cpu: pd.DataFrame) -> pd.Series:
    """True for the CPU events that start after every earlier event of their thread has ended."""
    order = cpu.sort_values(["tid", "start_ns", "dur_ns"], ascending=[True, True, False])
    end = order["start_ns"] + order["dur_ns"]
    open_until = end.groupby(order["tid"]).cummax().groupby(order["tid"]).shift(1)
    mask = open_until.isna() | (order["start_ns"] >= open_until)
    return mask.reindex(cpu.index)
