"""Turn one parsed Kineto trace into the Store's `events` and `steps` tables for one rank window.

Promise: every complete ('X') event is given a `kind` (compute, comm, memcpy, memset, sync, gpu_annotation,
runtime, cpu_op, annotation, collective_cpu, counter_range); `ProfilerStep#N` annotations become `steps` rows
and every event gets its step (`assign_steps`). The kinds: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.collectors.traces.comm_kernels import DTYPE_BYTES, CommKernels, collective_of, message_elems
from perftracker.collectors.traces.kineto_columns import MAX_SHAPE_TEXT, EventColumns, codes_of, narrow
from perftracker.collectors.traces.kineto_read import ParsedTrace
from perftracker.store.schema import conform
from perftracker.values import ascii_int, int_in

__all__ = ["MAX_SHAPE_TEXT", "build_tables", "collective_of", "message_elems"]

CPU_COLLECTIVE = re.compile(r"^(c10d::|gloo:|nccl:|record_param_comms$|c10d_functional::)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")

_CAT_KIND = {  # by lower-cased category (old traces name them 'Kernel', 'Runtime', 'Memcpy', 'Memset'); else annotation
    "kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "memcpy": "memcpy", "memset": "memset",
    "cuda_sync": "sync", "gpu_user_annotation": "gpu_annotation", "cuda_runtime": "runtime", "cuda_driver": "runtime",
    "runtime": "runtime",
    "mtia_runtime": "runtime", "privateuse1_runtime": "runtime", "cpu_op": "cpu_op", "operator": "cpu_op",
    "python_function": "cpu_op", "user_annotation": "annotation", "mtia_ccp_events": "compute",
    "privateuse1_driver": "runtime", "cuda_profiler_range": "counter_range",
}
_GPU_KINDS = frozenset({"compute", "comm", "memcpy", "memset", "sync", "gpu_annotation"})

# Kinds in code order: the events table's `kind` is built from these codes.
KIND_NAMES = ("compute", "comm", "memcpy", "memset", "sync", "gpu_annotation", "runtime", "cpu_op", "annotation",
               "collective_cpu", "counter_range")
KIND_CODE = {k: i for i, k in enumerate(KIND_NAMES)}
_IS_GPU_KIND = np.array([k in _GPU_KINDS for k in KIND_NAMES])


def _categorical(codes: npt.NDArray[np.integer[Any]], values: list[str]) -> pd.Series:
    """values[codes] as a Categorical of the values present, sorted (what `astype("category")` makes;
    with no values at all, that has categories of dtype object)."""
    present = np.flatnonzero(np.bincount(codes, minlength=len(values)))
    order = sorted(present.tolist(), key=values.__getitem__)
    remap = np.full(len(values), -1, dtype=np.int32)
    remap[order] = np.arange(len(order))
    categories = pd.Index([values[i] for i in order], dtype="str" if len(codes) else object)
    return pd.Series(pd.Categorical.from_codes(remap[codes], dtype=pd.CategoricalDtype(categories)), copy=False)


def _recoded(codes: npt.NDArray[Any], values: list[str]) -> tuple[npt.NDArray[np.int32], list[str]]:
    """`codes` into `values` (distinct) as codes into the values as the events table spells them (one
    entry per spelling: a value with a lone surrogate is read with U+FFFD)."""
    again, spelled = codes_of(values)
    return (again.astype(np.int32)[codes] if len(codes) else codes.astype(np.int32)), spelled


def comm_families(kind: npt.NDArray[np.integer[Any]], name_codes: npt.NDArray[np.integer[Any]], name_values: list[str],
                  comm_kernels: CommKernels) -> tuple[npt.NDArray[np.int32], list[str]]:
    """Turn the compute events whose names are a communication library's kernels into comm events (`kind`
    changed in place); each comm event's library as codes into ['', the libraries], 0 for other events."""
    family_of_name = [comm_kernels.family_of(v) for v in name_values]
    values = ["", *sorted(set(family_of_name) - {""})]
    code_of = {v: i for i, v in enumerate(values)}
    family = np.array([code_of[f] for f in family_of_name], dtype=np.int32)[name_codes]
    kind[(kind == KIND_CODE["compute"]) & (family > 0)] = KIND_CODE["comm"]
    return np.where(kind == KIND_CODE["comm"], family, 0), values


def build_tables(
    trace: ParsedTrace, rank: int, window: int, comm_kernels: CommKernels
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events, steps) frames for one trace, conforming to the Store schema (names and categories classified
    once per distinct value, the per-event work array code on the trace's columns)."""
    cols = trace.columns
    n = cols.n_kept
    name_codes, name_values = _recoded(cols.name_code[cols.kept], cols.name_values)
    cat_codes, cat_values = _recoded(cols.cat_code, cols.cat_values)
    kind = np.array([KIND_CODE[_CAT_KIND.get(c.lower(), "annotation")] for c in cat_values], dtype=np.int8)[cat_codes]
    del cat_codes
    family_codes, family_values = comm_families(kind, name_codes, name_values, comm_kernels)
    is_cpu_coll = np.array([bool(CPU_COLLECTIVE.search(v)) for v in name_values], dtype=bool)
    cpu_side = (kind == KIND_CODE["cpu_op"]) | (kind == KIND_CODE["annotation"])
    kind[cpu_side & is_cpu_coll[name_codes]] = KIND_CODE["collective_cpu"]
    ts = cols.ts_ns
    dur = cols.dur_ns
    stream = cols.stream.copy()  # changed below: the trace's columns stay as read
    device = cols.device.copy()
    corr = cols.correlation
    tid = cols.tid
    pg_codes, pg_values = _recoded(cols.pg_code, cols.pg_values)

    gpu = _IS_GPU_KIND[kind]
    stream[~gpu] = -1
    # GPU events without a stream arg (old traces): their tid is the stream.
    no_stream = gpu & (stream < 0)
    stream[no_stream] = tid[no_stream]
    no_dev = gpu & (device < 0)
    device[no_dev] = cols.pid_device[no_dev]

    step_of_name = np.array([_step_number(v) for v in name_values], dtype=np.int64)
    steps = _steps(step_of_name[name_codes], stream, ts, dur, rank, window)
    coll_codes, coll_values = _collectives(name_codes, name_values, kind, cols.hint_code, cols.hint_values)
    nbytes = _sized_by_shapes(cols, kind)
    events = pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32), "window": np.full(n, window, dtype=np.int16),
        "device": narrow(device, np.int16), "stream": narrow(stream, np.int32), "tid": tid,
        "kind": _categorical(kind, list(KIND_NAMES)),
        "name": _categorical(name_codes, name_values), "start_ns": ts, "dur_ns": np.maximum(dur, 0),
        "step": assign_steps(steps, stream, ts, corr, unlaunched_in_no_step=True), "correlation": corr,
        "external_id": cols.external_id,
        "collective": _categorical(coll_codes, coll_values), "bytes": nbytes,
        "pg": _categorical(pg_codes, pg_values), "group_size": cols.group_size, "seq": cols.seq, "peer": cols.peer,
        "splits": _categorical(*_recoded(cols.split_code, cols.split_values)),
        "comm_family": _categorical(family_codes, family_values), **_shape_args(cols, kind),
    }, copy=False)
    return events, conform("steps", steps)


_SHAPE_COLUMNS = ("input_dims", "input_types", "concrete_inputs")


def _shape_args(cols: EventColumns, kind: npt.NDArray[np.int8]) -> dict[str, pd.Series]:
    """The shape columns of framework ops (`Input Dims`, `Input type`, `Concrete Inputs` as JSON text), '' elsewhere."""
    is_op = (kind == KIND_CODE["cpu_op"]) | (kind == KIND_CODE["collective_cpu"])  # c10d::send's peer, splits
    out: dict[str, pd.Series] = {}
    for column, codes, keys in zip(_SHAPE_COLUMNS, cols.shape_code, cols.shape_values):
        texts, raw = _recoded(np.where(is_op, codes, 0), [k.decode("utf-8", "replace") for k in keys])
        compact, values = codes_of([_compact_json(v) for v in raw])  # one spelling per value: pretty-printed traces
        out[column] = _categorical(compact[texts] if len(texts) else texts, values)
    return out


def _sized_by_shapes(cols: EventColumns, kind: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
    """The events' bytes, with CPU collectives that record no size (gloo:*, c10d::*) sized by their first input's
    `Input Dims` and `Input type` (one tensor, or a list of tensors: their elements summed)."""
    nbytes = cols.nbytes
    need = (kind == KIND_CODE["collective_cpu"]) & (nbytes < 0) & (cols.shape_code[0] > 0)
    if not need.any():
        return nbytes
    nbytes = nbytes.copy()
    pairs = np.stack([cols.shape_code[0][need], cols.shape_code[1][need]], axis=1)
    distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
    dims_values, type_values = cols.shape_values[0], cols.shape_values[1]
    sizes = np.array([_first_input_bytes(dims_values[d], type_values[t]) for d, t in distinct.tolist()], dtype=np.int64)
    nbytes[need] = sizes[inverse.reshape(-1)]
    return nbytes


def _first_input_bytes(dims_raw: bytes, types_raw: bytes) -> int:
    """Bytes of an op's first input from its `Input Dims` ([[n, m], ...] or [[[n], [m]], ...]) and `Input type`
    (['float', ...], 'TensorList' counted as float); -1 when they do not say."""
    try:
        dims, types = msgspec.json.decode(dims_raw), msgspec.json.decode(types_raw) if types_raw else []
    except (msgspec.DecodeError, UnicodeError):
        return -1
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or not dims[0]:
        return -1
    flat = all(isinstance(d, int) for d in dims[0])
    shapes = [dims[0]] if flat else [d for d in dims[0] if isinstance(d, list)]
    elems = 0
    for shape in shapes[:4096]:
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            return -1
        elems += int(np.prod(shape, dtype=np.float64))
    name = str(types[0]).lower() if isinstance(types, list) and types else "float"
    size = int_in(elems * DTYPE_BYTES.get(name, 4), 0)
    return -1 if size is None else size


def _compact_json(text: str) -> str:
    """`text` as compact JSON ('[[1,2],[]]'), '' when it is not JSON (a cut value)."""
    try:
        return msgspec.json.encode(msgspec.json.decode(text)).decode() if text else ""
    except (msgspec.DecodeError, UnicodeError):
        return ""


def _step_number(name: str) -> int:
    match = _STEP.match(name)
    number = ascii_int(match.group(1), 0) if match else None
    return -1 if number is None else number


def _collectives(name_codes: npt.NDArray[np.int32], name_values: list[str], kind: npt.NDArray[np.int8],
                 hint_code: npt.NDArray[np.int32], hint_values: list[str]) -> tuple[npt.NDArray[np.int32], list[str]]:
    """Codes into a list of collective names ('' first) for comm kernels and CPU collectives, named once per
    distinct (name, hint)."""
    rows = np.flatnonzero((kind == KIND_CODE["comm"]) | (kind == KIND_CODE["collective_cpu"]))
    pairs, inverse = np.unique(np.stack([name_codes[rows], hint_code[rows]], axis=1), axis=0, return_inverse=True)
    named, values = codes_of(["", *(collective_of(name_values[name], hint_values[hint] if hint >= 0 else None)
                                    for name, hint in pairs.tolist())])
    codes = np.zeros(len(kind), dtype=np.int32)
    codes[rows] = named[1:][inverse.reshape(-1)]
    return codes, values


def _steps(step_number: npt.NDArray[np.int64], stream: npt.NDArray[np.int64], ts: npt.NDArray[np.int64],
           dur: npt.NDArray[np.int64], rank: int, window: int) -> pd.DataFrame:
    """`ProfilerStep#N` annotations (CPU side) as steps: the first of each number by start time."""
    ann = np.flatnonzero((stream < 0) & (step_number >= 0))
    steps = pd.DataFrame({
        "rank": rank, "window": window, "step": step_number[ann],
        "start_ns": ts[ann], "dur_ns": np.maximum(dur[ann], 0),
        "source": _categorical(np.zeros(len(ann), dtype=np.int64), ["profiler"]),
    })
    return steps.sort_values("start_ns").drop_duplicates("step", keep="first").reset_index(drop=True)


def assign_steps(steps: pd.DataFrame, stream: npt.NDArray[np.int64], ts: npt.NDArray[np.int64],
                 corr: npt.NDArray[np.int64], unlaunched_in_no_step: bool) -> npt.NDArray[np.int64]:
    """Each event's step (-1: none), `steps` sorted by start, one row per step: CPU events by time, a GPU event
    its launch's; with `unlaunched_in_no_step`, a GPU event launched before the window belongs to no step.
    The Kineto and Nsight Systems paths both assign steps here."""
    result = np.full(len(ts), -1, dtype=np.int64)
    if steps.empty:
        return result
    starts = steps["start_ns"].to_numpy()
    ends = starts + steps["dur_ns"].to_numpy()
    numbers = steps["step"].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.clip(pos, 0, None)])
    result[inside] = numbers[pos[inside]]
    gpu = stream >= 0
    launch = (~gpu) & (corr >= 0)
    if launch.any() and gpu.any():
        launch_step = pd.Series(result[launch], index=corr[launch])
        launch_step = launch_step[~launch_step.index.duplicated()]
        mapped = pd.Series(corr[gpu]).map(launch_step).to_numpy()
        by_time = result[gpu]
        if unlaunched_in_no_step:  # its launch preceded the trace
            by_time = np.where(pd.isna(mapped) & (corr[gpu] > 0), -1, by_time)
        result[gpu] = np.where(pd.isna(mapped), by_time, mapped).astype(np.int64)
    return result
