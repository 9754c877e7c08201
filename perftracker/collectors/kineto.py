"""Turn one parsed Kineto trace into the Store's `events` and `steps` tables for one rank window.

Every complete ('X') event is classified into a `kind`:
compute / comm (GPU kernels; NCCL/RCCL names plus user patterns), memcpy, memset, sync (GPU-side
cuda_sync), gpu_annotation, runtime (CUDA/HIP/MTIA runtime and driver calls), cpu_op, annotation
(user annotations) and collective_cpu (c10d::*, gloo:*, nccl:*, record_param_comms).
`ProfilerStep#N` annotations become rows of `steps`; every event gets the step it belongs to
(CPU events by time, GPU events through the launch that queued them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from re import Pattern

import numpy as np
import pandas as pd

from perftracker.collectors.kineto_read import ParsedTrace
from perftracker.store.schema import conform

DEFAULT_COMM_KERNEL = re.compile(r"^(nccl|rccl|ncclx|ncclDevKernel|ncclKernel)", re.IGNORECASE)
_CPU_COLLECTIVE = re.compile(r"^(c10d::|gloo:|nccl:|record_param_comms$|c10d_functional::)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")

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


def collective_of(name: str, hint: str | None = None) -> str:
    """The canonical collective ('all_reduce', ...) a kernel or CPU op performs, or ''."""
    text = (hint or name).lower().replace("_", "").replace(" ", "")
    text = re.sub(r"^(c10d::|gloo:|nccl:|nccldevkernel|ncclkernel|nccl|rccl)", "", text)
    for needle, canonical in _COLLECTIVES:
        if needle in text:
            return canonical
    return ""


def compile_comm_patterns(extra: Iterable[str] = ()) -> list[Pattern[str]]:
    """The built-in NCCL/RCCL kernel pattern plus user patterns for custom communication kernels."""
    return [DEFAULT_COMM_KERNEL, *(re.compile(p) for p in extra)]


def _kinds(cats: pd.Series, names: pd.Series, comm_patterns: list[Pattern[str]]) -> pd.Series:
    cat_lower = cats.str.lower()
    kind = cat_lower.map(_CAT_KIND).astype(object)
    # Old traces name categories 'Kernel', 'Runtime', 'Memcpy', 'Memset'.
    kind = kind.where(kind.notna(), cat_lower.map({"memcpy": "memcpy", "memset": "memset"}))
    kind = kind.fillna("annotation")
    unique_names = pd.Series(names.unique())
    is_comm = {n: any(p.search(n) for p in comm_patterns) for n in unique_names}
    is_cpu_coll = {n: bool(_CPU_COLLECTIVE.search(n)) for n in unique_names}
    comm_mask = (kind == "compute") & names.map(is_comm).astype(bool)
    kind[comm_mask] = "comm"
    coll_mask = kind.isin(["cpu_op", "annotation"]) & names.map(is_cpu_coll).astype(bool)
    kind[coll_mask] = "collective_cpu"
    return kind


def build_tables(
    trace: ParsedTrace, rank: int, window: int, comm_patterns: list[Pattern[str]]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events, steps) frames for one trace, conforming to the Store schema."""
    phs = pd.Series(trace.phs, dtype=object)
    cats = pd.Series(trace.cats, dtype=object)
    keep = (phs == "X") & ~cats.str.lower().isin(_SKIP_CATS)
    idx = np.flatnonzero(keep.to_numpy())
    names = pd.Series(trace.names, dtype=object).iloc[idx].reset_index(drop=True)
    cats = cats.iloc[idx].reset_index(drop=True)
    kinds = _kinds(cats, names, comm_patterns)
    ts = np.asarray(trace.ts_ns, dtype=np.int64)[idx]
    dur = np.asarray(trace.dur_ns, dtype=np.int64)[idx]

    n = len(idx)
    stream = np.full(n, -1, dtype=np.int64)
    device = np.full(n, -1, dtype=np.int64)
    corr = np.full(n, -1, dtype=np.int64)
    ext = np.full(n, -1, dtype=np.int64)
    nbytes = np.full(n, -1, dtype=np.int64)
    gsize = np.full(n, -1, dtype=np.int64)
    coll_hint: list[str | None] = [None] * n
    pg: list[str] = [""] * n
    tid = np.full(n, -1, dtype=np.int64)
    args_list, tids, pids = trace.args, trace.tids, trace.pids
    for out_i, src_i in enumerate(idx.tolist()):
        t = tids[src_i]
        if type(t) is int:
            tid[out_i] = t
        a = args_list[src_i]
        if a is None:
            continue
        if a.stream is not None:
            stream[out_i] = a.stream
        if a.device is not None:
            device[out_i] = a.device
        if a.correlation is not None:
            corr[out_i] = a.correlation
        if a.external_id is not None:
            ext[out_i] = a.external_id
        if a.collective_name is not None:
            coll_hint[out_i] = a.collective_name
            if a.pg_name is not None:
                pg[out_i] = str(a.pg_name)
            if a.group_size is not None:
                gsize[out_i] = a.group_size
            elems = a.in_msg_nelems if a.in_msg_nelems is not None else a.out_msg_nelems
            if elems is not None:
                nbytes[out_i] = elems * _DTYPE_BYTES.get((a.dtype or "float").lower(), 4)
        elif a.nbytes is not None:
            nbytes[out_i] = a.nbytes

    kind_arr = kinds.to_numpy()
    gpu = np.isin(kind_arr, list(_GPU_KINDS))
    cpu = ~gpu
    stream[cpu] = -1
    # GPU events without a stream arg (old traces): their tid is the stream.
    stream[gpu & (stream < 0)] = tid[gpu & (stream < 0)]
    pid_dev = np.array([p if type(p) is int else -1 for p in (pids[i] for i in idx.tolist())], dtype=np.int64)
    no_dev = gpu & (device < 0)
    device[no_dev] = pid_dev[no_dev]

    collective = _collectives(names, kinds, coll_hint)
    events = pd.DataFrame({
        "rank": rank, "window": window, "device": device, "stream": stream, "tid": tid,
        "kind": kinds, "name": names, "start_ns": ts, "dur_ns": np.maximum(dur, 0),
        "correlation": corr, "external_id": ext, "collective": collective, "bytes": nbytes,
        "pg": pg, "group_size": gsize,
    })
    steps = _steps(events, rank, window)
    events["step"] = _assign_steps(events, steps)
    return conform("events", events), conform("steps", steps)


def _collectives(names: pd.Series, kinds: pd.Series, hints: list[str | None]) -> pd.Series:
    relevant = kinds.isin(["comm", "collective_cpu"]).to_numpy()
    out = [""] * len(names)
    cache: dict[tuple[str, str | None], str] = {}
    name_list = names.tolist()
    for i in np.flatnonzero(relevant).tolist():
        key = (name_list[i], hints[i])
        if key not in cache:
            cache[key] = collective_of(name_list[i], hints[i])
        out[i] = cache[key]
    return pd.Series(out, dtype=object)


def _steps(events: pd.DataFrame, rank: int, window: int) -> pd.DataFrame:
    ann = events[(events["stream"] < 0) & events["name"].str.startswith("ProfilerStep#", na=False)]
    numbers = ann["name"].str.extract(_STEP)[0]
    ann = ann[numbers.notna()]
    steps = pd.DataFrame({
        "rank": rank, "window": window, "step": numbers[numbers.notna()].astype(np.int64),
        "start_ns": ann["start_ns"], "dur_ns": ann["dur_ns"], "source": "profiler",
    })
    return steps.sort_values("start_ns").drop_duplicates("step", keep="first").reset_index(drop=True)


def _assign_steps(events: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of each event: CPU events by start time; GPU events through their launch's correlation."""
    result = np.full(len(events), -1, dtype=np.int64)
    if steps.empty:
        return result
    starts = steps["start_ns"].to_numpy()
    ends = starts + steps["dur_ns"].to_numpy()
    numbers = steps["step"].to_numpy()
    ts = events["start_ns"].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.clip(pos, 0, None)])
    result[inside] = numbers[pos[inside]]
    gpu = (events["stream"] >= 0).to_numpy()
    corr = events["correlation"].to_numpy()
    launch = (~gpu) & (corr >= 0)
    if launch.any() and gpu.any():
        launch_step = pd.Series(result[launch], index=corr[launch])
        launch_step = launch_step[~launch_step.index.duplicated()]
        mapped = pd.Series(corr[gpu]).map(launch_step).to_numpy()
        gpu_steps = np.where(pd.isna(mapped), result[gpu], mapped)
        result[gpu] = gpu_steps.astype(np.int64)
    return result
