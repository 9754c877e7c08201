"""Where each rank's GPU time goes: compute, communication, memory copies and idle, with overlap."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.grouping import per_value
from perftracker.analyzers.traces.intervals import intersect, total, union
from perftracker.store import Store

WORK_KINDS = ("compute", "comm", "memcpy", "memset")
Ints = npt.NDArray[np.int64]
KLASSES = ("comm", "compute", "memory", "wait")  # wait: a comm kernel waiting for late ranks (comm_split)


def as_int(value: Any) -> int:
    """A pandas group key (numpy integer) as int."""
    return int(value)


def gpu_work(store: Store, hta_compat: bool = False) -> pd.DataFrame:
    """GPU events that count as work, with a `klass` column: compute | comm | memory (and `comm_family`)."""
    columns = ["rank", "window", "step", "stream", "name", "start_ns", "dur_ns", "correlation", "comm_family"]
    if hta_compat:
        ev = _drop_last_step_like_hta(store, [*columns, "kind"])
        gpu = (ev["stream"] >= 0) & (ev["kind"] != "gpu_annotation")
        out = ev.loc[gpu, columns]
        is_comm = per_value(out["name"], lambda name: name.startswith("nccl"))
        is_memory = per_value(out["name"], lambda name: "Memcpy" in name or "Memset" in name)
        klass = np.where(is_comm, "comm", np.where(is_memory, "memory", "compute"))
        # HTA reads ts and dur as whole microseconds
        out["start_ns"] = out["start_ns"] // 1000 * 1000
        out["dur_ns"] = out["dur_ns"] // 1000 * 1000
    else:
        picked = store.select_events(lambda ev: (ev["kind"].isin(WORK_KINDS) & (ev["stream"] >= 0)).to_numpy(),
                                     read_columns=[*columns, "kind"])
        out, kind = picked[columns], picked["kind"]
        klass = np.where(kind == "comm", "comm", np.where(kind.isin(["memcpy", "memset"]), "memory", "compute"))
    out["end_ns"] = out["start_ns"] + out["dur_ns"]
    out["klass"] = pd.Categorical(klass, categories=KLASSES)  # one row per GPU event: a code, not a string
    return out


def _drop_last_step_like_hta(store: Store, columns: list[str] | None = None) -> pd.DataFrame:
    """HTA keeps CPU events starting before the last ProfilerStep and GPU events launched by them; grouped by
    rank window, CPU events before GPU events, as HTA's per-rank frames are; only `columns` (default: all)."""
    if columns is None:
        ev = store.events  # every column of every event: the memory hazard, only under --hta-compat
    else:
        ev = store.event_columns(list(dict.fromkeys([*columns, "rank", "window", "stream", "start_ns", "correlation"])))
    if ev.empty:
        return ev if columns is None else ev[columns]
    rank = ev["rank"].to_numpy().astype(np.int64)
    window = ev["window"].to_numpy().astype(np.int64)
    key = rank * 65536 + (window + 32768)  # sorts like (rank, window)
    steps = store.steps[store.steps["source"] == "profiler"]
    per_window = steps.groupby(["rank", "window"], observed=True).agg(n=("step", "nunique"), last=("start_ns", "max"))
    trimmed = per_window[per_window["n"] >= 2]
    last_start = {int(r) * 65536 + int(w) + 32768: int(t) for (r, w), t in zip(trimmed.index, trimmed["last"])}
    # Rows of one key: the runs of equal keys (one per trace file, normally), in order.
    bounds = np.concatenate([[0], np.flatnonzero(key[1:] != key[:-1]) + 1, [len(key)]])
    runs: dict[int, list[npt.NDArray[np.int64]]] = {}
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        runs.setdefault(int(key[lo]), []).append(np.arange(lo, hi))
    stream = ev["stream"].to_numpy()
    start = ev["start_ns"].to_numpy()
    corr = ev["correlation"].to_numpy()
    parts = []
    for k in sorted(runs):
        rows = np.concatenate(runs[k])
        if k not in last_start:
            parts.append(rows)
            continue
        cpu = stream[rows] < 0
        kept_cpu = cpu & (start[rows] < last_start[k])
        cpu_corr = corr[rows[kept_cpu]]
        kept_gpu = ~cpu & np.isin(corr[rows], cpu_corr[cpu_corr >= 0])
        parts.extend([rows[kept_cpu], rows[kept_gpu]])
    frame = ev if columns is None else ev[columns]
    return frame.take(np.concatenate(parts)) if parts else frame


def work_sets(group: pd.DataFrame) -> dict[str, tuple[Ints, Ints]]:
    """The GPU work of `group` (`gpu_work` rows) as disjoint intervals: busy (all of it), each klass, working
    (compute or comm), waiting (working or waiting for late ranks) and hidden (comm under compute)."""
    s = group["start_ns"].to_numpy(np.int64)
    e = group["end_ns"].to_numpy(np.int64)
    klasses = group["klass"].to_numpy()
    working = (klasses == "compute") | (klasses == "comm")
    sets = {"busy": union(s, e), "working": union(s[working], e[working]),
            "waiting": union(s[working | (klasses == "wait")], e[working | (klasses == "wait")]),
            **{klass: union(s[klasses == klass], e[klasses == klass]) for klass in KLASSES}}
    sets["hidden"] = intersect(*sets["compute"], *sets["comm"])
    return sets


def _one(group: pd.DataFrame) -> dict[str, float]:
    sets = work_sets(group)
    all_s, all_e = sets["busy"]
    span = int(all_e.max() - all_s.min()) if len(all_s) else 0
    busy, compute, comm, overlap = (total(*sets[k]) for k in ("busy", "compute", "comm", "hidden"))
    # waiting for late ranks with neither compute nor a transfer running (0 without comm_split's "wait" rows)
    wait_exposed = total(*sets["waiting"]) - total(*sets["working"])
    return {
        "span_ns": span, "busy_ns": busy, "idle_ns": span - busy, "compute_ns": compute,
        "comm_ns": comm, "comm_overlapped_ns": overlap, "comm_exposed_ns": comm - overlap,
        "memory_ns": total(*sets["memory"]), "memory_exposed_ns": max(0, busy - compute - (comm - overlap) - wait_exposed),
        "wait_ns": total(*sets["wait"]), "wait_exposed_ns": wait_exposed,
        "n_kernels": len(group),
    }


def breakdown(store: Store, hta_compat: bool = False, work: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per rank window: span, busy, idle, compute, comm (total/overlapped/exposed), memory, their
    percentages of the span, `overlap_pct` (NaN without communication) and the window's profiled `steps`
    (`work`: `gpu_work(store, hta_compat)` when already computed)."""
    work = gpu_work(store, hta_compat) if work is None else work
    frame = pd.DataFrame([{"rank": as_int(rank), "window": as_int(window), **_one(group)}
                          for (rank, window), group in work.groupby(["rank", "window"], sort=True, observed=True)])
    if frame.empty:
        return frame
    steps = store.steps[store.steps["source"] == "profiler"].groupby(["rank", "window"]).size()
    frame["steps"] = [int(steps.get((r, w), 0)) for r, w in zip(frame["rank"], frame["window"])]
    span = frame["span_ns"].where(frame["span_ns"] > 0)
    for col in ("idle", "compute", "comm_exposed", "memory_exposed", "wait_exposed"):
        frame[f"{col}_pct"] = 100.0 * frame[f"{col}_ns"] / span
    frame["overlap_pct"] = 100.0 * frame["comm_overlapped_ns"] / frame["comm_ns"].where(frame["comm_ns"] > 0)
    if hta_compat:
        # HTA counts overlapped communication as compute: non-compute = span - compute - idle.
        frame["non_compute_ns"] = frame["span_ns"] - frame["compute_ns"] - frame["idle_ns"]
        frame["non_compute_pct"] = 100.0 * frame["non_compute_ns"] / span
    return frame


def breakdown_per_step(store: Store, work: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank window and step: the same quantities over the GPU work that step launched."""
    work = gpu_work(store) if work is None else work
    work = work[work["step"] >= 0]
    return pd.DataFrame([{"rank": as_int(rank), "window": as_int(window), "step": as_int(step), **_one(group)}
                         for (rank, window, step), group in work.groupby(["rank", "window", "step"], sort=True,
                                                                          observed=True)])


def gpu_work_view(analysis: Analysis) -> pd.DataFrame:
    """The GPU work of the run by perftracker's definition (idle gaps and per-step breakdowns use it)."""
    return gpu_work(analysis.store)


def breakdown_view(analysis: Analysis) -> pd.DataFrame:
    """The breakdown per rank window under the analysis's definition (`--hta-compat` or not); perftracker's
    counts a communication kernel's wait for late ranks as waiting, not communication (`comm_split`)."""
    if analysis.options.hta_compat:
        return breakdown(analysis.store, hta_compat=True)
    from perftracker.analyzers.traces.comm_split import transfer_work_view

    return breakdown(analysis.store, work=analysis.view(transfer_work_view))


def breakdown_steps_view(analysis: Analysis) -> pd.DataFrame:
    """The breakdown per rank window and step (perftracker's definition, waiting told apart)."""
    from perftracker.analyzers.traces.comm_split import transfer_work_view

    return breakdown_per_step(analysis.store, work=analysis.view(transfer_work_view))
