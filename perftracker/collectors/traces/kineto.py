"""Turn one parsed Kineto trace into the Store's `events` and `steps` tables for one rank window.

Every complete ('X') event is classified into a `kind`:
compute / comm (GPU kernels; communication by the kernel name patterns of `comm_kernels`, whose
family is the event's `comm_family`), memcpy, memset, sync (GPU-side cuda_sync), gpu_annotation,
runtime (CUDA/HIP/MTIA runtime and driver calls), cpu_op, annotation (user annotations),
collective_cpu (c10d::*, gloo:*, nccl:*, record_param_comms) and counter_range (CUPTI range-profiler
counter ranges, `cuda_profiler_range`, which take the place of kernel events).
`ProfilerStep#N` annotations become rows of `steps`; every event gets the step it belongs to
(CPU events by time, GPU events through the launch that queued them).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]

from perftracker.bounded import clean_text
from perftracker.collectors.traces.comm_kernels import CommKernels
from perftracker.collectors.traces.kineto_read import EventArgs, ParsedTrace
from perftracker.store.schema import conform
from perftracker.values import INT32_MAX, INT64_MAX, INT64_MIN, ascii_int, int_in

_CPU_COLLECTIVE = re.compile(r"^(c10d::|gloo:|nccl:|record_param_comms$|c10d_functional::)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
T = TypeVar("T")

_CAT_KIND = {
    "kernel": "compute",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "cpu_op",
    "user_annotation": "annotation",
    "mtia_ccp_events": "compute",
    "privateuse1_driver": "runtime",
    "cuda_profiler_range": "counter_range",
}
_GPU_KINDS = frozenset({"compute", "comm", "memcpy", "memset", "sync", "gpu_annotation"})
_SKIP_CATS = frozenset({"trace", "ac2g", "fwdbwd", "flow", "cpu_instant_event", "python"})

# Canonical collective names, matched against lower-cased names with separators removed.
_COLLECTIVES = (
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("allreduce", "all_reduce"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("send", "send"),
    ("recv", "recv"),
)
_DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
                "long": 8, "int64": 8, "int": 4, "int32": 4, "byte": 1, "char": 1, "bool": 1, "short": 2,
                "float8_e4m3fn": 1, "float8_e5m2": 1}


def message_elems(collective: str, in_elems: int | None, out_elems: int | None, group_size: int) -> int | None:
    """The element count of a collective's message as nccl-tests sizes it for bus bandwidth: the output
    buffer of an all-gather (n x the per-rank input, when the trace gives only the input), the input of
    a reduce-scatter and of everything else (an all-reduce's input and output are the same size)."""
    if collective == "all_gather":
        if out_elems is not None:
            return out_elems
        return None if in_elems is None or group_size <= 0 else in_elems * group_size
    return in_elems if in_elems is not None else out_elems


def collective_of(name: str, hint: str | None = None) -> str:
    """The canonical collective ('all_reduce', ...) a kernel or CPU op performs, or ''."""
    text = (hint or name).lower().replace("_", "").replace(" ", "")
    text = re.sub(r"^(c10d::|gloo:|nccl:|nccldevkernel|ncclkernel|nccl|rccl)", "", text)
    for needle, canonical in _COLLECTIVES:
        if needle in text:
            return canonical
    return ""


# Kinds in code order: the events table's `kind` is built from these codes.
_KIND_NAMES = ("compute", "comm", "memcpy", "memset", "sync", "gpu_annotation", "runtime", "cpu_op", "annotation",
               "collective_cpu", "counter_range")
_KIND_CODE = {k: i for i, k in enumerate(_KIND_NAMES)}
_IS_GPU_KIND = np.array([k in _GPU_KINDS for k in _KIND_NAMES])


def _cat_kind(cat: str) -> int:
    lower = cat.lower()
    # Old traces name categories 'Kernel', 'Runtime', 'Memcpy', 'Memset'.
    return _KIND_CODE[_CAT_KIND.get(lower) or {"memcpy": "memcpy", "memset": "memset"}.get(lower, "annotation")]


def _codes(values: list[str]) -> tuple[npt.NDArray[np.int64], list[str]]:
    """(code of each value, distinct values in order of first appearance)."""
    try:  # Arrow hashes the strings in C++, about twice as fast as a dict
        encoded = pa.array(values, type=pa.string()).dictionary_encode()
        codes: npt.NDArray[np.int64] = encoded.indices.to_numpy().astype(np.int64)
        distinct: list[str] = encoded.dictionary.to_pylist()
        return codes, distinct
    except (pa.ArrowException, UnicodeError):  # e.g. a lone surrogate from a JSON escape
        pass
    table: dict[str, int] = {}
    for value in values:
        table.setdefault(clean_text(value), len(table))
    return (np.fromiter((table[clean_text(v)] for v in values), dtype=np.int64, count=len(values)),
            list(table))


def _categorical(codes: npt.NDArray[np.int64], values: list[str]) -> pd.Series:
    """values[codes] as a Categorical of the values present, sorted (what `astype("category")` makes;
    with no values at all, that has categories of dtype object)."""
    present = np.flatnonzero(np.bincount(codes, minlength=len(values)))
    order = sorted(present.tolist(), key=values.__getitem__)
    remap = np.full(len(values), -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    categories = pd.Index([values[i] for i in order], dtype="str" if len(codes) else object)
    return pd.Series(pd.Categorical.from_codes(remap[codes], dtype=pd.CategoricalDtype(categories)), copy=False)


def _ints(values: list[Any]) -> npt.NDArray[np.int64]:
    """An int64 array of the ints in `values`, -1 for anything else (None, strings, ints past int64)."""
    if set(map(type, values)) <= {int}:
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            pass
    return np.fromiter((v if type(v) is int and INT64_MIN <= v <= INT64_MAX else -1 for v in values),
                       dtype=np.int64, count=len(values))


def _arg_ints(values: list[int | None]) -> npt.NDArray[np.int64]:
    """An int64 array of integer args (absent ones are already -1), None (null in the file) and ints past
    int64 as -1."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, OverflowError):
        return _ints(values)


def _narrow(values: npt.NDArray[np.int64], dtype: type[np.signedinteger[Any]]) -> npt.NDArray[Any]:
    """`values` as a narrower int type, those it cannot hold as -1 (never a wrapped value)."""
    info = np.iinfo(dtype)
    return np.where((values < info.min) | (values > info.max), -1, values).astype(dtype)


_NO_ARGS = EventArgs()


def build_tables(
    trace: ParsedTrace, rank: int, window: int, comm_kernels: CommKernels
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events, steps) frames for one trace, conforming to the Store schema.

    Names and categories are classified once per distinct value; the per-event work is array code.
    """
    ph_codes, ph_values = _codes(trace.phs)
    cat_codes, cat_values = _codes(trace.cats)
    keep = (np.array([v == "X" for v in ph_values], dtype=bool)[ph_codes]
            & ~np.array([v.lower() in _SKIP_CATS for v in cat_values], dtype=bool)[cat_codes])
    idx = np.flatnonzero(keep)
    picked = idx.tolist()
    n = len(picked)

    def pick(column: list[T]) -> list[T]:
        return [column[i] for i in picked] if n < len(keep) else column

    name_codes, name_values = _codes(trace.names)
    name_codes = name_codes[idx]
    kind = np.array([_cat_kind(c) for c in cat_values], dtype=np.int8)[cat_codes[idx]]
    family_of_name = [comm_kernels.family_of(v) for v in name_values]
    is_comm = np.array([bool(f) for f in family_of_name], dtype=bool)
    is_cpu_coll = np.array([bool(_CPU_COLLECTIVE.search(v)) for v in name_values], dtype=bool)
    kind[(kind == _KIND_CODE["compute"]) & is_comm[name_codes]] = _KIND_CODE["comm"]
    cpu_side = (kind == _KIND_CODE["cpu_op"]) | (kind == _KIND_CODE["annotation"])
    kind[cpu_side & is_cpu_coll[name_codes]] = _KIND_CODE["collective_cpu"]
    ts = trace.ts_ns_array[idx]
    dur = trace.dur_ns_array[idx]

    args = [_NO_ARGS if a is None else a for a in pick(trace.args)]
    stream = _arg_ints([a.stream for a in args])
    device = _arg_ints([a.device for a in args])
    corr = _arg_ints([a.correlation for a in args])
    ext = _arg_ints([a.external_id for a in args])
    nbytes = _arg_ints([a.nbytes for a in args])
    tid = _ints(pick(trace.tids))
    coll_rows = [i for i, a in enumerate(args) if a.collective_name is not None]
    gsize = np.full(n, -1, dtype=np.int64)
    hints: dict[int, str] = {}
    pg_codes = np.zeros(n, dtype=np.int64)
    pg_code_of = {"": 0}
    for i in coll_rows:
        a = args[i]
        hints[i] = str(a.collective_name)
        if a.pg_name is not None:
            pg_codes[i] = pg_code_of.setdefault(clean_text(str(a.pg_name)), len(pg_code_of))
        if a.group_size is not None:
            gsize[i] = int_in(a.group_size, -1, INT32_MAX) or -1
        elems = message_elems(collective_of(str(a.collective_name)), a.in_msg_nelems, a.out_msg_nelems,
                              int(gsize[i]))
        size = None if elems is None else int_in(elems * _DTYPE_BYTES.get((a.dtype or "float").lower(), 4), 0)
        nbytes[i] = -1 if size is None else size

    gpu = _IS_GPU_KIND[kind]
    stream[~gpu] = -1
    # GPU events without a stream arg (old traces): their tid is the stream.
    no_stream = gpu & (stream < 0)
    stream[no_stream] = tid[no_stream]
    no_dev = gpu & (device < 0)
    if no_dev.any():
        device[no_dev] = _ints([trace.pids[i] for i in idx[no_dev].tolist()])

    step_of_name = np.array([_step_number(v) for v in name_values], dtype=np.int64)
    steps = _steps(step_of_name[name_codes], stream, ts, dur, rank, window)
    coll_codes, coll_values = _collectives(name_codes, name_values, kind, hints)
    family_codes, family_values = _comm_families(name_codes, family_of_name, kind)
    events = pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32), "window": np.full(n, window, dtype=np.int16),
        "device": _narrow(device, np.int16), "stream": _narrow(stream, np.int32), "tid": tid,
        "kind": _categorical(kind.astype(np.int64), list(_KIND_NAMES)),
        "name": _categorical(name_codes, name_values), "start_ns": ts, "dur_ns": np.maximum(dur, 0),
        "step": _assign_steps(steps, stream, ts, corr), "correlation": corr, "external_id": ext,
        "collective": _categorical(coll_codes, coll_values), "bytes": nbytes,
        "pg": _categorical(pg_codes, list(pg_code_of)), "group_size": _narrow(gsize, np.int32),
        "comm_family": _categorical(family_codes, family_values), **_shape_args(args, kind),
    })
    return events, conform("steps", steps)


_SHAPE_FIELDS = (("input_dims", "input_dims"), ("input_types", "input_type"), ("concrete_inputs", "concrete_inputs"))
MAX_SHAPE_TEXT = 4096  # longer arg lists are cut (and so no longer JSON: their op gets no model)


def _shape_args(args: list[EventArgs], kind: npt.NDArray[np.int8]) -> dict[str, pd.Series]:
    """The shape columns of framework ops (`Input Dims`, `Input type`, `Concrete Inputs` as JSON text), '' elsewhere."""
    is_op = (kind == _KIND_CODE["cpu_op"]).tolist()
    out: dict[str, pd.Series] = {}
    for column, attr in _SHAPE_FIELDS:
        codes, raw = _codes([bytes(getattr(a, attr))[:MAX_SHAPE_TEXT].decode("utf-8", "replace") if op else ""
                             for a, op in zip(args, is_op)])
        compact, values = _codes([_compact_json(v) for v in raw])  # one spelling per value: pretty-printed traces
        out[column] = _categorical(compact[codes] if len(codes) else codes, values)
    return out


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


def _collectives(name_codes: npt.NDArray[np.int64], name_values: list[str], kind: npt.NDArray[np.int8],
                 hints: dict[int, str]) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Codes into a list of collective names ('' first) for comm kernels and CPU collectives."""
    relevant = (kind == _KIND_CODE["comm"]) | (kind == _KIND_CODE["collective_cpu"])
    codes = np.zeros(len(kind), dtype=np.int64)
    values = [""]
    seen: dict[tuple[int, str | None], int] = {}
    code_of = {"": 0}
    for i in np.flatnonzero(relevant).tolist():
        key = (int(name_codes[i]), hints.get(i))
        if key not in seen:
            text = collective_of(name_values[key[0]], key[1])
            if text not in code_of:
                code_of[text] = len(values)
                values.append(text)
            seen[key] = code_of[text]
        codes[i] = seen[key]
    return codes, values


def _comm_families(name_codes: npt.NDArray[np.int64], family_of_name: list[str],
                   kind: npt.NDArray[np.int8]) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Codes into a list of family names ('' first): the library of each comm kernel, '' for other events."""
    values = ["", *sorted({f for f in family_of_name if f})]
    code_of = {v: i for i, v in enumerate(values)}
    per_name = np.array([code_of[f] for f in family_of_name], dtype=np.int64)
    codes = per_name[name_codes] if len(name_codes) else np.zeros(0, dtype=np.int64)
    return np.where(kind == _KIND_CODE["comm"], codes, 0), values


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


def _assign_steps(steps: pd.DataFrame, stream: npt.NDArray[np.int64], ts: npt.NDArray[np.int64],
                  corr: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Step of each event: CPU events by start time; GPU events through their launch's correlation. A GPU event
    whose launch is not in a trace that records launches was launched before the profiled window: it belongs to
    no step (-1), whatever its time (its time used to put earlier work into the first steps)."""
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
        unlaunched = pd.isna(mapped) & (corr[gpu] > 0)  # its launch preceded the trace
        gpu_steps = np.where(unlaunched, -1, np.where(pd.isna(mapped), result[gpu], mapped))
        result[gpu] = gpu_steps.astype(np.int64)
    return result
