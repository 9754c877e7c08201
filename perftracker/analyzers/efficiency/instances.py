"""Every modelled op instance of the run with its FLOPs, bytes and the GPU time of the kernels it launched
(`op_instances_view`: those without a modelled ancestor)."""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.models import MATH_ATTENTION, MODELS, model_op
from perftracker.analyzers.efficiency.shapes import parse_args
from perftracker.analyzers.traces.cpu_ops import cpu_calls_view
from perftracker.analyzers.traces.gpu_time import gpu_work_view
from perftracker.analyzers.traces.grouping import per_value

Ints = npt.NDArray[np.int64]
SHAPE_COLUMNS = ["input_dims", "input_types", "concrete_inputs"]
_KEY = ["rank", "window", "start_ns", "dur_ns", "name"]
_MODEL_FIELDS = ("family", "flops", "bytes", "dtype", "shape", "m", "n", "k", "batch", "causal", "backward")
INSTANCE_COLUMNS = ["rank", "window", "step", "op", *_MODEL_FIELDS, "math_attention", "kernels", "gpu_ns", "start_ns"]
AUTOGRAD = "autograd::engine::evaluate_function"
_HOST_COPY = re.compile(r"(?i)HtoD|DtoH|HtoH|PtoP|HostToDevice|DeviceToHost|PeerToPeer")



def _shapes(analysis: Analysis) -> pd.DataFrame:
    """The shape columns of framework ops a model knows, keyed by rank, window, start, duration and name."""
    store = analysis.store
    if not set(SHAPE_COLUMNS) <= set(store.events_schema().columns):
        return pd.DataFrame(columns=[*_KEY, *SHAPE_COLUMNS])
    picked = store.select_events(lambda ev: (ev["kind"] == "cpu_op").to_numpy() & per_value(ev["name"], MODELS.__contains__),
                                 read_columns=["kind", *_KEY, *SHAPE_COLUMNS])
    picked = picked[[*_KEY, *SHAPE_COLUMNS]].assign(name=picked["name"].astype(str))
    return picked.drop_duplicates(_KEY)


def _models(ops: pd.DataFrame) -> pd.DataFrame:
    """The model's fields for each row of `ops` (name and shape columns), computed once per distinct signature."""
    keys = [pd.Categorical(ops[c]) for c in ["name", *SHAPE_COLUMNS]]
    codes, distinct = pd.MultiIndex.from_arrays([k.codes for k in keys]).factorize()
    answers = []
    for name_i, dims_i, types_i, conc_i in distinct:
        texts = [str(k.categories[i]) if i >= 0 else "" for k, i in zip(keys, (name_i, dims_i, types_i, conc_i))]
        parsed = parse_args(texts[1], texts[2], texts[3])
        answers.append(model_op(texts[0], parsed) if parsed is not None else None)
    rows = {f: [getattr(a, f) if a is not None else None for a in answers] for f in _MODEL_FIELDS}
    table = pd.DataFrame(rows).assign(known=[a is not None for a in answers])
    return table.iloc[codes].reset_index(drop=True)


def _climb(parent: Ints, start: Ints, hit: npt.NDArray[np.bool_], include_self: bool) -> Ints:
    """For each row in `start`, the nearest row up its call tree (itself first when `include_self`) with `hit`."""
    found = np.full(len(start), -1, dtype=np.int64)
    cur = start.copy() if include_self else np.where(start >= 0, parent[np.clip(start, 0, None)], -1)
    open_ = cur >= 0
    while open_.any():
        rows = cur[open_]
        yes = hit[rows]
        idx = np.flatnonzero(open_)
        found[idx[yes]] = rows[yes]
        cur[idx] = np.where(yes, -1, parent[rows])
        open_ = cur >= 0
    return found


def _union_ns(owner: Ints, start: Ints, end: Ints, n: int) -> Ints:
    """Per owner (0..n-1), the length of the union of its intervals."""
    order = np.lexsort((start, owner))
    o, s, e = owner[order], start[order], end[order]
    frame = pd.DataFrame({"o": o, "e": e})
    reach = frame.groupby("o", sort=False)["e"].cummax().to_numpy()
    before = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    before[np.concatenate([[True], o[1:] != o[:-1]])] = np.iinfo(np.int64).min
    covered = np.maximum(e - np.maximum(s, before), 0)
    return np.bincount(o, weights=covered, minlength=n).astype(np.int64)


def _launch_kernels(analysis: Analysis, calls: pd.DataFrame) -> pd.DataFrame:
    """GPU compute and memory work joined to the CPU call row of its launch (`call`, -1 when not found)."""
    work = analysis.view(gpu_work_view)
    host_copy = per_value(work["name"], lambda n: _HOST_COPY.search(n) is not None)  # PCIe, not device memory
    work = work[(work["klass"] != "comm").to_numpy() & ~host_copy][["rank", "window", "correlation", "start_ns",
                                                                    "end_ns"]]
    launches = calls[(calls["kind"] == "runtime") & (calls["correlation"] >= 0)]
    keys = pd.DataFrame({"rank": launches["rank"].to_numpy(), "window": launches["window"].to_numpy(),
                         "correlation": launches["correlation"].to_numpy(), "call": launches.index.to_numpy()})
    keys = keys.drop_duplicates(["rank", "window", "correlation"])
    joined = work.merge(keys, how="left", on=["rank", "window", "correlation"])
    joined["call"] = joined["call"].fillna(-1).astype(np.int64)
    return joined


def op_instances(analysis: Analysis) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(modelled instances, unmodelled GPU time by launching op): see docs/internals/analyzers.md."""
    calls = analysis.view(cpu_calls_view)
    names = calls["name"]
    candidate = per_value(names, MODELS.__contains__) & (calls["kind"] == "cpu_op").to_numpy()
    cand = calls.loc[candidate, ["rank", "window", "start_ns", "dur_ns", "name", "step"]]
    cand = cand.assign(name=cand["name"].astype(str), row=cand.index.to_numpy())
    ops = cand.merge(_shapes(analysis), how="inner", on=_KEY)
    fields = _models(ops) if len(ops) else pd.DataFrame(columns=[*_MODEL_FIELDS, "known"])
    ops = pd.concat([ops.reset_index(drop=True), fields], axis=1)
    ops = ops[ops["known"].astype(bool)]
    n = len(calls)
    parent = calls["parent"].to_numpy(np.int64)
    is_model = np.zeros(n, dtype=bool)
    is_model[ops["row"].to_numpy(np.int64)] = True
    rows = ops["row"].to_numpy(np.int64)
    outer = _climb(parent, rows, is_model, include_self=False) < 0
    ops, rows = ops[outer], rows[outer]
    is_outer = np.zeros(n, dtype=bool)
    is_outer[rows] = True
    in_autograd = _climb(parent, rows, per_value(names, lambda v: v.startswith(AUTOGRAD)), include_self=False) >= 0
    by_name = ops["name"].str.contains("backward", case=False).to_numpy()
    math_rows = np.flatnonzero(per_value(names, lambda v: v == MATH_ATTENTION))
    math_owner = _climb(parent, math_rows, is_outer, include_self=True)
    kernels = _launch_kernels(analysis, calls)
    call = kernels["call"].to_numpy(np.int64)
    owner = _climb(parent, call, is_outer, include_self=True)
    slot = np.full(n, -1, dtype=np.int64)
    slot[rows] = np.arange(len(rows))
    mine = owner >= 0
    k_owner = slot[owner[mine]]
    gpu_ns = _union_ns(k_owner, kernels["start_ns"].to_numpy(np.int64)[mine], kernels["end_ns"].to_numpy(np.int64)[mine],
                       len(rows))
    out = pd.DataFrame({
        "rank": ops["rank"].to_numpy(), "window": ops["window"].to_numpy(), "step": ops["step"].to_numpy(np.int64),
        "op": ops["name"].to_numpy(), **{f: ops[f].to_numpy() for f in _MODEL_FIELDS},
        "math_attention": np.isin(rows, math_owner[math_owner >= 0]),
        "kernels": np.bincount(k_owner, minlength=len(rows)).astype(np.int64), "gpu_ns": gpu_ns,
        "start_ns": ops["start_ns"].to_numpy(np.int64),
    })
    out["backward"] = out["backward"].astype(bool) | in_autograd | by_name
    out = out.astype({"flops": "float64", "bytes": "float64", "m": "int64", "n": "int64", "k": "int64",
                      "batch": "int64", "causal": "bool"})
    return out[INSTANCE_COLUMNS].reset_index(drop=True), _unmodelled(calls, kernels, mine)


def _unmodelled(calls: pd.DataFrame, kernels: pd.DataFrame, owned: npt.NDArray[np.bool_]) -> pd.DataFrame:
    """GPU time (sum of kernel durations) and kernels by the op that launched them, for kernels no modelled op owns."""
    rest = kernels[~owned]
    call = rest["call"].to_numpy(np.int64)
    names = pd.Categorical(calls["name"])
    name_codes = np.asarray(names.codes, dtype=np.int64)
    op_row = np.where(call >= 0, calls["op"].to_numpy(np.int64)[np.clip(call, 0, None)], -1) if len(calls) else call
    code = np.where(op_row >= 0, name_codes[np.clip(op_row, 0, None)], -1) if len(calls) else op_row
    frame = pd.DataFrame({"rank": rest["rank"].to_numpy(), "code": code,
                          "gpu_ns": (rest["end_ns"] - rest["start_ns"]).to_numpy(np.int64)})
    out = frame.groupby(["rank", "code"], sort=True)["gpu_ns"].agg(["size", "sum"])  # a named agg costs ~3x
    out = out.set_axis(["kernels", "gpu_ns"], axis=1).reset_index()
    labels = [*map(str, names.categories), "(launch not found)"]
    out["op"] = [labels[c] for c in out["code"].tolist()]
    return out[["rank", "op", "kernels", "gpu_ns"]]


def op_instances_view(analysis: Analysis) -> pd.DataFrame:
    """Every modelled op instance (docs/internals/analyzers.md), computed once per analysis."""
    return analysis.view(op_instances)[0]


def unmodelled_view(analysis: Analysis) -> pd.DataFrame:
    """The GPU time no model covers, by launching op and rank."""
    return analysis.view(op_instances)[1]
