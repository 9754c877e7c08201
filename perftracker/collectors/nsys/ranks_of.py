"""An export's rows split into ranks: each CUDA device of each process with GPU activity is one rank.

Promise: `split_ranks(export, rows, comm_kernels, step_name)` groups the GPU rows by (process, device),
gives each process's CPU rows (runtime calls, NVTX ranges of its threads) to the rank of its lowest
device (a process driving several GPUs is rare in training; a note says so when it happens), resolves
every name id through StringIds once, and builds each rank's tables (`tables.build_rank_tables`).
Ranks come out in (device, process) order. Rows of processes without GPU activity (the launcher,
nsys itself) are left out.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.collectors.nsys.database import Export
from perftracker.collectors.nsys.nvtx import NVTX_DOMAIN_CREATE, NVTX_RANGE_TYPES, RangeName, classify
from perftracker.collectors.nsys.rows import Rows, strings
from perftracker.collectors.nsys.tables import (
    KIND,
    Part,
    build_rank_tables,
    copy_name,
    runtime_name,
    sync_name,
)
from perftracker.collectors.traces.comm_kernels import CommKernels

_GPU_TABLES = ("kernel", "graph", "memcpy", "memset", "sync")
_DEVICE_TABLES = _GPU_TABLES[:4]  # rows that say a process drives a device (a sync row may name none)
_PID = 24


@dataclass
class OneRank:
    label: str  # "process <pid> GPU <device>"
    pid: int
    device: int
    events: pd.DataFrame
    steps: pd.DataFrame


@dataclass
class RankSplit:
    ranks: list[OneRank] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _pid(global_id: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return (global_id >> _PID) & 0xFFFFFF


def split_ranks(export: Export, rows: dict[str, Rows], comm_kernels: CommKernels, step_name: str = "") -> RankSplit:
    """The ranks of one export (see the module's promise)."""
    split = RankSplit()
    devices = {(int(d), int(p)) for key in _DEVICE_TABLES if len(rows[key])
               for d, p in zip(rows[key].cols["device"].tolist(), _pid(rows[key].cols["gpid"]).tolist())}
    keys = sorted(devices)
    if not keys:
        return split
    first_device: dict[int, int] = {}
    for device, pid in keys:
        first_device.setdefault(pid, device)
    several = sorted(p for p in first_device if sum(1 for _, q in keys if q == p) > 1)
    if several:
        split.notes.append(f"process(es) {', '.join(map(str, several))} drive several GPUs: their CPU events (runtime "
                           "calls, NVTX ranges) are counted with the rank of their lowest GPU")
    ids = [rows["kernel"].cols.get("name", np.zeros(0, np.int64)), rows["runtime"].cols.get("name", np.zeros(0, np.int64)),
           rows["nvtx"].cols.get("textId", np.zeros(0, np.int64))]
    text = strings(export, np.unique(np.concatenate(ids)).tolist())
    nvtx = _nvtx_rows(export, rows["nvtx"], text, step_name)
    for device, pid in keys:
        parts = [*_gpu_parts(rows, text, pid, device, first_device[pid] == device, {d for d, q in keys if q == pid})]
        if first_device[pid] == device:
            parts += _cpu_parts(rows["runtime"], nvtx, text, pid)
        events, steps = build_rank_tables(parts, comm_kernels, -1)
        split.ranks.append(OneRank(f"process {pid} GPU {device}", pid, device, events, steps))
    if step_name and not any(len(r.steps) for r in split.ranks):
        split.notes.append(f"no NVTX range is named {step_name!r}: no steps from it")
    return split


def _gpu_parts(rows: dict[str, Rows], text: dict[int, str], pid: int, device: int, first: bool,
               own: set[int]) -> list[Part]:
    parts = []
    for key in _GPU_TABLES:
        table = rows[key]
        if not len(table):
            continue
        select = (_pid(table.cols["gpid"]) == pid) & (table.cols["device"] == device)
        if key == "sync" and first:  # a synchronization naming no device this process drives: its first one's
            select |= (_pid(table.cols["gpid"]) == pid) & ~np.isin(table.cols["device"], list(own))
        mine = table.take(select)
        c = mine.cols
        n = len(mine)
        if key == "kernel":
            kind, names = KIND["compute"], [text.get(int(i), "unknown kernel") for i in c["name"].tolist()]
        elif key == "graph":
            kind, names = KIND["compute"], [f"CUDA graph {g}" for g in c["graph"].tolist()]
        elif key == "memcpy":
            kind, names = KIND["memcpy"], [copy_name(int(k)) for k in c["copy"].tolist()]
        elif key == "memset":
            kind, names = KIND["memset"], ["Memset"] * n
        else:
            kind, names = KIND["sync"], [sync_name(int(k)) for k in c["sync"].tolist()]
        none = np.full(n, -1, dtype=np.int64)
        parts.append(Part(np.full(n, kind, dtype=np.int64), names, c["start"], c["end"], c["device"], c["stream"],
                          c["stream"], c["correlation"], c.get("bytes", none), none))
    return parts


@dataclass
class _Nvtx:
    rows: Rows
    names: list[RangeName]


def _nvtx_rows(export: Export, nvtx: Rows, text: dict[int, str], step_name: str) -> _Nvtx:
    """The NVTX ranges (push/pop and start/end) with what each is."""
    ranges = nvtx.take(np.isin(nvtx.cols["type"], NVTX_RANGE_TYPES)) if len(nvtx) else nvtx
    nccl_domains = _nccl_domains(export)
    known: dict[tuple[str, bool], RangeName] = {}
    names = []
    domain = ranges.cols.get("domain", np.zeros(0, np.int64)).tolist()
    ids = ranges.cols.get("textId", np.zeros(0, np.int64)).tolist()
    for inline, text_id, dom in zip(ranges.text or [None] * len(ids), ids, domain):
        label = inline if inline is not None else text.get(int(text_id), "")
        nccl = dom in nccl_domains if nccl_domains else (dom != 0 and label.startswith("nccl"))
        key = (label, nccl)
        if key not in known:
            known[key] = classify(label, nccl, step_name)
        names.append(known[key])
    return _Nvtx(ranges, names)


def _nccl_domains(export: Export) -> set[int]:
    """The NVTX domain ids NCCL created (its domain-create event names it), when the export has them."""
    if not export.has("NVTX_EVENTS", "eventType", "domainId", "text"):
        return set()
    try:
        found = export.conn.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = ? AND text = 'NCCL' "
                                    "LIMIT 100", (NVTX_DOMAIN_CREATE,)).fetchall()
    except sqlite3.Error:
        return set()
    return {int(d) for (d,) in found if isinstance(d, int)}


def _cpu_parts(runtime: Rows, nvtx: _Nvtx, text: dict[int, str], pid: int) -> list[Part]:
    parts = []
    if len(runtime):
        mine = runtime.take(_pid(runtime.cols["gtid"]) == pid)
        c = mine.cols
        n = len(mine)
        none = np.full(n, -1, dtype=np.int64)
        names = [runtime_name(text.get(int(i), "unknown runtime call")) for i in c["name"].tolist()]
        parts.append(Part(np.full(n, KIND["runtime"], dtype=np.int64), names, c["start"], c["end"], none, none,
                          c["gtid"] & 0xFFFFFF, c["correlation"], none, none))
    if len(nvtx.rows):
        select = _pid(nvtx.rows.cols["gtid"]) == pid
        idx = np.flatnonzero(select).tolist()
        mine = nvtx.rows.take(select)
        c = mine.cols
        n = len(mine)
        none = np.full(n, -1, dtype=np.int64)
        kinds = np.array([KIND[nvtx.names[i].kind] for i in idx], dtype=np.int64)
        step = np.array([-2 if nvtx.names[i].user_step else nvtx.names[i].step for i in idx], dtype=np.int64)
        parts.append(Part(kinds, [nvtx.names[i].name for i in idx], c["start"], c["end"], none, none,
                          c["gtid"] & 0xFFFFFF, none, none, step))
    return parts
