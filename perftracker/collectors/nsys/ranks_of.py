"""An export's rows split into ranks: each CUDA device of each process with GPU activity is one rank.

Promise: `split_ranks(export, rows, comm_kernels, step_name)` groups the GPU rows by (process, device), gives a
process's CPU rows to the rank of its lowest device, resolves names once and builds each rank's `events` and
`steps` as the Kineto path makes them (`build_rank_tables`), in (device, process) order; processes without GPU
activity are left out. `classify` says what an NVTX range is (a PyTorch op, a collective, a step or a user range).
Rules: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.collectors.nsys.database import Export, Rows, strings
from perftracker.collectors.traces.comm_kernels import CommKernels
from perftracker.collectors.traces.kineto import CPU_COLLECTIVE, assign_steps, collective_of, comm_families
from perftracker.collectors.traces.kineto import KIND_CODE as KIND
from perftracker.collectors.traces.kineto import KIND_NAMES as KINDS
from perftracker.store.schema import conform
from perftracker.values import ascii_int

_GPU_TABLES = ("kernel", "graph", "memcpy", "memset", "sync")
_GPU_NAMED = {"kernel": ("compute", "name"), "graph": ("compute", "graph"), "memcpy": ("memcpy", "copy"),
              "memset": ("memset", ""), "sync": ("sync", "sync")}  # table: (kind, the column naming a row)
_DEVICE_TABLES = _GPU_TABLES[:4]  # rows that say a process drives a device (a sync row may name none)
_PID = 24
_VERSION_SUFFIX = re.compile(r"_v\d{1,6}$")
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
               9: "HtoH", 10: "PtoP"}
_SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}

# autograd-nvtx names: "aten::add, op_id = 31", "aten::mm, seq = 12, op_id = 40, sizes = [[2, 3], [3, 4]]"
_OP_TAIL = re.compile(r", (?:seq|op_id|sizes|input_op_ids)\b")
_SIZES = re.compile(r", sizes = (\[[^\]\n]{0,2000}\](?:\])?)")
_STEP_NAMES = (
    re.compile(r"^ProfilerStep#(\d{1,18})$"),
    re.compile(r"^(?:iteration|iter|step|train_step|training_step|train step|global_step)[ _#:=-]{0,3}(\d{1,18})$",
               re.IGNORECASE),
)
NVTX_RANGE_TYPES = (59, 60, 70)  # NvtxPushPopRange, NvtxStartEndRange, NvtxtPushPopRange
NVTX_DOMAIN_CREATE = 75


@dataclass(frozen=True)
class RangeName:
    name: str  # as the events table holds it
    kind: str  # cpu_op | collective_cpu | annotation
    step: int  # step number when this name is a numbered step range, else -1
    user_step: bool  # the user's chosen step range (numbered by order)
    shapes: str  # autograd-shapes-nvtx sizes, "" when absent


def op_name(text: str) -> tuple[str, str]:
    """(op name, shapes text) of an autograd-nvtx range name; (text, "") for any other name."""
    match = _OP_TAIL.search(text)
    if not match:
        return text, ""
    sizes = _SIZES.search(text, match.start())
    return text[:match.start()], sizes.group(1) if sizes else ""


def classify(text: str, nccl_domain: bool, step_name: str = "") -> RangeName:
    """What one NVTX range name is (see the module's promise)."""
    name, shapes = op_name(text)
    is_op = name != text
    if step_name and step_name in (text, name):
        return RangeName(text, "annotation", -1, True, "")
    for pattern in _STEP_NAMES:
        match = pattern.match(text)
        if match:
            number = ascii_int(match.group(1), 0)
            return RangeName(text, "annotation", -1 if number is None else number, False, "")
    if nccl_domain:
        return RangeName(name, "collective_cpu" if collective_of(name) else "annotation", -1, False, "")
    if CPU_COLLECTIVE.search(name):
        return RangeName(name, "collective_cpu", -1, False, shapes)
    return RangeName(name, "cpu_op" if is_op else "annotation", -1, False, shapes)


class NameTable:
    """Every distinct name of an export once, with its code (the Part rows carry codes)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._code: dict[str, int] = {}

    def code(self, name: str) -> int:
        found = self._code.get(name)
        if found is None:
            found = self._code[name] = len(self.names)
            self.names.append(name)
        return found

    def of(self, keys: npt.NDArray[np.int64], name_of: Callable[[int], str]) -> npt.NDArray[np.int64]:
        """The code of each row's name, `name_of` asked once per distinct key."""
        distinct, inverse = np.unique(keys, return_inverse=True)
        codes = np.array([self.code(name_of(int(k))) for k in distinct.tolist()], dtype=np.int64)
        return codes[inverse] if len(keys) else np.zeros(0, np.int64)


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
    table = NameTable()
    nvtx = _nvtx_rows(export, rows["nvtx"], text, step_name, table)
    for device, pid in keys:
        own = {d for d, q in keys if q == pid}
        parts = [*_gpu_parts(rows, text, pid, device, first_device[pid] == device, own, table)]
        if first_device[pid] == device:
            parts += _cpu_parts(rows["runtime"], nvtx, text, pid, table)
        events, steps = build_rank_tables(parts, table.names, comm_kernels, -1)
        split.ranks.append(OneRank(f"process {pid} GPU {device}", pid, device, events, steps))
    if step_name and not any(len(r.steps) for r in split.ranks):
        split.notes.append(f"no NVTX range is named {step_name!r}: no steps from it")
    return split


def _gpu_parts(rows: dict[str, Rows], text: dict[int, str], pid: int, device: int, first: bool,
               own: set[int], table: NameTable) -> list[Part]:
    parts = []
    for key in _GPU_TABLES:
        got = rows[key]
        if not len(got):
            continue
        select = (_pid(got.cols["gpid"]) == pid) & (got.cols["device"] == device)
        if key == "sync" and first:  # a synchronization naming no device this process drives: its first one's
            select |= (_pid(got.cols["gpid"]) == pid) & ~np.isin(got.cols["device"], list(own))
        mine = got.take(select)
        c, n = mine.cols, len(mine)
        kind, column = _GPU_NAMED[key]
        namer = {"kernel": lambda i: text.get(i, "unknown kernel"), "graph": lambda g: f"CUDA graph {g}",
                 "memcpy": lambda k: f"Memcpy {_COPY_KINDS.get(k, 'Unknown')}",
                 "sync": lambda k: _SYNC_NAMES.get(k, "Synchronization")}.get(key)
        names = table.of(c[column], namer) if namer else np.full(n, table.code("Memset"), dtype=np.int64)
        none = np.full(n, -1, dtype=np.int64)
        parts.append(Part(np.full(n, KIND[kind], dtype=np.int64), names, c["start"], c["end"], c["device"],
                          c["stream"], c["stream"], c["correlation"], c.get("bytes", none), none))
    return parts


@dataclass
class _Nvtx:
    rows: Rows
    name: npt.NDArray[np.int64]  # code into the NameTable, per range
    kind: npt.NDArray[np.int64]  # code into KINDS
    step: npt.NDArray[np.int64]  # step number, -2 for the user's step range, -1 otherwise


def _nvtx_rows(export: Export, nvtx: Rows, text: dict[int, str], step_name: str, table: NameTable) -> _Nvtx:
    """The NVTX ranges (push/pop and start/end) with what each is, classified once per distinct name."""
    ranges = nvtx.take(np.isin(nvtx.cols["type"], NVTX_RANGE_TYPES)) if len(nvtx) else nvtx
    n = len(ranges)
    if not n:
        empty = np.zeros(0, np.int64)
        return _Nvtx(ranges, empty, empty, empty)
    inline, labels = pd.factorize(pd.Series(ranges.text or [None] * n, dtype=object))
    text_ids = ranges.cols["textId"]
    key = np.where(inline >= 0, inline, len(labels) + 1 + np.maximum(text_ids, -1))  # one key per distinct label
    nccl_domains = _nccl_domains(export)
    domain = ranges.cols["domain"]
    dom_key = np.isin(domain, list(nccl_domains)) if nccl_domains else domain != 0
    distinct, inverse = np.unique(key * 2 + dom_key, return_inverse=True)
    name, kind, step = [], [], []
    for k, in_domain in ((d >> 1, d & 1) for d in distinct.tolist()):
        label = str(labels[k]) if k < len(labels) else text.get(k - len(labels) - 1, "")
        nccl = bool(in_domain) and (bool(nccl_domains) or label.startswith("nccl"))
        what = classify(label, nccl, step_name)
        name.append(table.code(what.name))
        kind.append(KIND[what.kind])
        step.append(-2 if what.user_step else what.step)
    inverse = inverse.reshape(-1)
    return _Nvtx(ranges, np.array(name, np.int64)[inverse], np.array(kind, np.int64)[inverse],
                 np.array(step, np.int64)[inverse])


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


def _cpu_parts(runtime: Rows, nvtx: _Nvtx, text: dict[int, str], pid: int, table: NameTable) -> list[Part]:
    parts = []
    if len(runtime):
        mine = runtime.take(_pid(runtime.cols["gtid"]) == pid)
        c = mine.cols
        none = np.full(len(mine), -1, dtype=np.int64)
        names = table.of(c["name"], lambda i: _VERSION_SUFFIX.sub("", text.get(i, "unknown runtime call")))
        parts.append(Part(np.full(len(mine), KIND["runtime"], dtype=np.int64), names, c["start"], c["end"], none,
                          none, c["gtid"] & 0xFFFFFF, c["correlation"], none, none))
    if len(nvtx.rows):
        select = np.flatnonzero(_pid(nvtx.rows.cols["gtid"]) == pid)
        c = {k: v[select] for k, v in nvtx.rows.cols.items()}
        none = np.full(len(select), -1, dtype=np.int64)
        parts.append(Part(nvtx.kind[select], nvtx.name[select], c["start"], c["end"], none, none,
                          c["gtid"] & 0xFFFFFF, none, none, nvtx.step[select]))
    return parts


@dataclass
class Part:
    """Rows of one kind for one rank: name texts by code, and int64 columns."""

    kind: npt.NDArray[np.int64]  # code into KINDS, per row
    name: npt.NDArray[np.int64]  # code into the export's name list, per row
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    device: npt.NDArray[np.int64]
    stream: npt.NDArray[np.int64]  # -1 for CPU rows
    tid: npt.NDArray[np.int64]
    correlation: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]  # step number for step ranges, -2 for the user's step range, else -1


def build_rank_tables(parts: list[Part], names: list[str], comm_kernels: CommKernels,
                      rank: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events, steps) of one rank from its parts, their names codes into `names` (see the module's promise)."""
    order = np.argsort(_cat(parts, "start"), kind="stable")  # events in time order, as a trace holds them
    kind, start, end = _cat(parts, "kind")[order], _cat(parts, "start")[order], _cat(parts, "end")[order]
    stream, corr = _cat(parts, "stream")[order], _cat(parts, "correlation")[order]
    present, inverse = np.unique(_cat(parts, "name")[order], return_inverse=True)
    codes = inverse.reshape(-1).astype(np.int64)
    values = [names[i] for i in present.tolist()]
    family_code, families = comm_families(kind, codes, values, comm_kernels)
    collectives = ["", *sorted({collective_of(v) for v in values} - {""})]
    coll_code = np.array([collectives.index(collective_of(v)) for v in values], dtype=np.int64)
    relevant = (kind == KIND["comm"]) | (kind == KIND["collective_cpu"])
    steps = _steps(_cat(parts, "step")[order], start, end, stream, rank)
    events = pd.DataFrame({
        "rank": rank, "window": 0, "device": _cat(parts, "device")[order], "stream": stream,
        "tid": _cat(parts, "tid")[order],
        "kind": pd.Categorical.from_codes(kind, dtype=pd.CategoricalDtype(list(KINDS))),
        "name": pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(values)),
        "start_ns": start, "dur_ns": end - start, "step": assign_steps(steps, stream, start, corr, unlaunched_in_no_step=False),
        "correlation": corr, "external_id": -1,
        "collective": pd.Categorical.from_codes(np.where(relevant, coll_code[codes], 0),
                                                dtype=pd.CategoricalDtype(collectives)),
        "bytes": _cat(parts, "nbytes")[order], "pg": "", "group_size": -1,
        "comm_family": pd.Categorical.from_codes(family_code, dtype=pd.CategoricalDtype(families)),
    })
    return conform("events", events), conform("steps", steps)


def _cat(parts: list[Part], column: str) -> npt.NDArray[np.int64]:
    arrays = [getattr(p, column) for p in parts]
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)


def _steps(mark: npt.NDArray[np.int64], start: npt.NDArray[np.int64], end: npt.NDArray[np.int64],
           stream: npt.NDArray[np.int64], rank: int) -> pd.DataFrame:
    """Step ranges (CPU side) as steps: numbered ones by their number (the first of each), the user's
    chosen range numbered 0, 1, ... in order of start."""
    numbered = np.flatnonzero((stream < 0) & (mark >= 0))
    user = np.flatnonzero((stream < 0) & (mark == -2))
    user = user[np.argsort(start[user], kind="stable")]
    number = np.concatenate([mark[numbered], np.arange(len(user), dtype=np.int64)])
    rows = np.concatenate([numbered, user])
    steps = pd.DataFrame({"rank": rank, "window": 0, "step": number, "start_ns": start[rows],
                          "dur_ns": end[rows] - start[rows], "source": "nvtx"})
    return steps.sort_values("start_ns", kind="stable").drop_duplicates("step", keep="first").reset_index(drop=True)
