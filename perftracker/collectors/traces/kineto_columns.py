"""A trace's events as compact columns, built a chunk of decoded events at a time.

Promise: `ColumnBuilder.add` keeps of one decoded chunk only what the events table needs, as arrays, with
strings interned once, so a trace costs about 100 bytes per kept event; `finish()` gives the `EventColumns`
that `kineto.build_tables` turns into the Store's tables.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

from perftracker.bounded import clean_text
from perftracker.collectors.traces.comm_kernels import DTYPE_BYTES, collective_of, message_elems
from perftracker.values import INT32_MAX, INT64_MAX, INT64_MIN, ascii_int, int_in

SKIP_CATS = frozenset({"trace", "ac2g", "fwdbwd", "flow", "cpu_instant_event", "python"})
MAX_SHAPE_TEXT = 4096  # longer arg lists are cut (and so no longer JSON: their op gets no model)
_I64 = np.int64
NO_RAW = msgspec.Raw(b"")  # an absent JSON value


# gc=False: these records hold no references that could form a cycle, and not tracking hundreds of
# thousands of them keeps the garbage collector from running over and over during a decode.
class EventArgs(msgspec.Struct, omit_defaults=True, gc=False):
    # -1 when absent (the events table's "unknown"); None when null in the file or not an int (loose reader).
    stream: int | None = -1
    device: int | None = -1
    correlation: int | None = -1
    external_id: int | None = msgspec.field(default=-1, name="External id")
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    pg_name: str | int | None = msgspec.field(default=None, name="Process Group Name")
    dtype: str | None = None
    nbytes: int | None = msgspec.field(default=-1, name="bytes")
    # record_param_comms' group and order (PyTorch 2.1-2.6+ profiler/util.cpp): the group's description and
    # members (JSON text "[0, 1]"), its own sequence number, a P2P op's global peer, all-to-all splits.
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: msgspec.Raw = msgspec.field(default=NO_RAW, name="Process Group Ranks")
    seq: int | str | None = msgspec.field(default=None, name="Seq")
    src_rank: int | str | None = msgspec.field(default=None, name="Src Rank")
    dst_rank: int | str | None = msgspec.field(default=None, name="Dst Rank")
    in_split: msgspec.Raw = msgspec.field(default=NO_RAW, name="In split size")
    out_split: msgspec.Raw = msgspec.field(default=NO_RAW, name="Out split size")
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")  # an op's shapes, kept as JSON text
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=NO_RAW, name="Concrete Inputs")


def codes_of(values: Sequence[str]) -> tuple[npt.NDArray[np.int64], list[str]]:
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


def ints(values: Sequence[Any]) -> npt.NDArray[np.int64]:
    """An int64 array of the ints in `values`, -1 for anything else (None, strings, ints past int64)."""
    if set(map(type, values)) <= {int}:
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            pass
    return np.fromiter((v if type(v) is int and INT64_MIN <= v <= INT64_MAX else -1 for v in values),
                       dtype=np.int64, count=len(values))


def arg_ints(values: Sequence[int | None]) -> npt.NDArray[np.int64]:
    """An int64 array of integer args (absent ones are already -1), None (null in the file) and ints past
    int64 as -1."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, OverflowError):
        return ints(values)


def narrow(values: npt.NDArray[np.int64], dtype: type[np.signedinteger[Any]]) -> npt.NDArray[Any]:
    """`values` as a narrower int type, those it cannot hold as -1 (never a wrapped value)."""
    info = np.iinfo(dtype)
    return np.where((values < info.min) | (values > info.max), -1, values).astype(dtype)


class _Interned:
    """Distinct strings in order of first appearance, and their codes."""

    def __init__(self, *first: str) -> None:
        self.code: dict[str, int] = {v: i for i, v in enumerate(first)}

    def values(self) -> list[str]:
        return list(self.code)

    def encode(self, values: Sequence[str]) -> npt.NDArray[np.int32]:
        """Codes of `values` (a chunk), new values added."""
        codes, distinct = codes_of(values)
        table = self.code
        mapping = np.fromiter((table.setdefault(v, len(table)) for v in distinct), dtype=np.int64,
                              count=len(distinct))
        return (mapping[codes] if len(codes) else codes).astype(np.int32)


@dataclass
class EventColumns:
    """One trace's events as arrays (see the module docstring). `name_code` and `kept` have one entry per
    event read; every other array one per kept event, in trace order."""

    name_values: list[str] = field(default_factory=list)
    name_code: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    kept: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))
    cat_values: list[str] = field(default_factory=list)
    cat_code: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    pid_device: npt.NDArray[np.int16] = field(default_factory=lambda: np.zeros(0, np.int16))
    tid: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    ts_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    dur_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    stream: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    device: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    correlation: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    external_id: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    nbytes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))
    hint_values: list[str] = field(default_factory=list)
    hint_code: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))  # -1: no hint
    pg_values: list[str] = field(default_factory=lambda: [""])
    pg_code: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    group_size: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    seq: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, _I64))  # the group's own order, -1
    peer: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))  # P2P global peer, -1
    split_values: list[str] = field(default_factory=lambda: [""])  # '[[in splits],[out splits]]' JSON text
    split_code: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    # pg name -> (description, members as JSON text) from record_param_comms (the groups ops name)
    groups_seen: dict[str, tuple[str, str]] = field(default_factory=dict)
    shape_values: list[list[bytes]] = field(default_factory=lambda: [[b""], [b""], [b""]])
    shape_code: list[npt.NDArray[np.int32]] = field(
        default_factory=lambda: [np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32)])
    negative_durations: int = 0  # events (kept or not) whose duration is negative

    @property
    def n_read(self) -> int:
        return len(self.name_code)

    @property
    def n_kept(self) -> int:
        return len(self.ts_ns)

    def names(self) -> list[str]:
        """The name of every event read."""
        values = self.name_values
        return [values[c] for c in self.name_code.tolist()]


_SHAPE_ATTRS = ("input_dims", "input_type", "concrete_inputs")
_ARRAYS = tuple(k for k, v in vars(EventColumns()).items() if isinstance(v, np.ndarray))  # the per-event arrays


class ColumnBuilder:
    """Builds `EventColumns` a chunk at a time (see the module docstring)."""

    def __init__(self) -> None:
        self.names = _Interned()
        self.cats = _Interned()
        self.phs = _Interned()
        self.hints = _Interned()
        self.pgs = _Interned("")
        self.splits = _Interned("")
        self.groups_seen: dict[str, tuple[str, str]] = {}
        self.shapes: list[dict[bytes, int]] = [{b"": 0}, {b"": 0}, {b"": 0}]
        self.parts: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in _ARRAYS}
        self.shape_parts: list[list[npt.NDArray[np.int32]]] = [[], [], []]
        self.keep_ph: list[bool] = []
        self.keep_cat: list[bool] = []
        self.negative = 0

    def _keep_table(self, interned: _Interned, table: list[bool], test: Any) -> npt.NDArray[np.bool_]:
        values = interned.values()
        table += [bool(test(v)) for v in values[len(table):]]
        return np.array(table, dtype=bool)

    def add(self, names: Sequence[str], cats: Sequence[str], phs: Sequence[str], pids: Sequence[Any],
            tids: Sequence[Any], ts_ns: npt.NDArray[np.int64], dur_ns: npt.NDArray[np.int64],
            args: Sequence[EventArgs | None]) -> None:
        """Add one chunk of events (every sequence one entry per event, in trace order)."""
        parts = self.parts
        self.negative += int((dur_ns < 0).sum())
        parts["name_code"].append(self.names.encode(names))
        cat_code = self.cats.encode(cats)
        ph_code = self.phs.encode(phs)
        keep = (self._keep_table(self.phs, self.keep_ph, lambda v: v == "X")[ph_code]
                & self._keep_table(self.cats, self.keep_cat, lambda v: v.lower() not in SKIP_CATS)[cat_code])
        parts["kept"].append(keep)
        picked = np.flatnonzero(keep).tolist()
        every = len(picked) == len(keep)

        def pick(column: Sequence[Any]) -> Sequence[Any]:
            return column if every else list(map(column.__getitem__, picked))

        parts["cat_code"].append(cat_code if every else cat_code[picked])
        parts["pid_device"].append(narrow(ints(pick(pids)), np.int16))
        parts["tid"].append(ints(pick(tids)))
        parts["ts_ns"].append(ts_ns if every else ts_ns[picked])
        parts["dur_ns"].append(dur_ns if every else dur_ns[picked])
        kept_args = [_NO_ARGS if a is None else a for a in pick(args)]
        for key in ("stream", "device", "correlation", "external_id"):
            parts[key].append(arg_ints(list(map(attrgetter(key), kept_args))))
        self._add_collectives(kept_args, arg_ints([a.nbytes for a in kept_args]))
        # one pass finds the few ops that record shapes; each column is interned by the bytes kept (the text is
        # made once per distinct value)
        shaped = [i for i, a in enumerate(kept_args) if a.input_dims or a.input_type or a.concrete_inputs]
        for column, attr in enumerate(_SHAPE_ATTRS):
            table = self.shapes[column]
            codes = np.zeros(len(kept_args), dtype=np.int32)
            for i in shaped:
                if raw := getattr(kept_args[i], attr):
                    codes[i] = table.setdefault(bytes(raw)[:MAX_SHAPE_TEXT], len(table))
            self.shape_parts[column].append(codes)

    def _add_collectives(self, kept_args: list[Any], nbytes: npt.NDArray[np.int64]) -> None:
        """The collective columns of a chunk's kept events (group, order, peer, splits, and the size the
        collective's args give into `nbytes`), read from the events that name a collective only."""
        n = len(kept_args)
        hint = np.full(n, -1, dtype=np.int32)
        pg = np.zeros(n, dtype=np.int32)
        gsize = np.full(n, -1, dtype=np.int64)
        seq = np.full(n, -1, dtype=np.int64)
        peer = np.full(n, -1, dtype=np.int32)
        split = np.zeros(n, dtype=np.int32)
        for i in [i for i, a in enumerate(kept_args) if a.collective_name is not None]:
            a = kept_args[i]
            name = str(a.collective_name)
            hint[i] = self.hints.code.setdefault(name, len(self.hints.code))
            if a.pg_name is not None:
                pg_name = clean_text(str(a.pg_name))
                pg[i] = self.pgs.code.setdefault(pg_name, len(self.pgs.code))
                if pg_name not in self.groups_seen and a.pg_ranks and len(self.groups_seen) < _MAX_GROUPS:
                    self.groups_seen[pg_name] = (clean_text(str(a.pg_desc or ""))[:200],
                                                 bytes(a.pg_ranks)[:_MAX_RANKS_TEXT].decode("utf-8", "replace"))
            seq[i] = _small_int(a.seq, -1)
            peer[i] = _small_int(a.dst_rank if a.dst_rank is not None else a.src_rank, -1)
            if a.in_split or a.out_split:
                text = _splits_text(a.in_split, a.out_split)
                if text:
                    split[i] = self.splits.code.setdefault(text, len(self.splits.code))
            if a.group_size is not None:
                gsize[i] = int_in(a.group_size, -1, INT32_MAX) or -1
            elems = message_elems(collective_of(name), a.in_msg_nelems, a.out_msg_nelems, int(gsize[i]))
            size = None if elems is None else int_in(elems * DTYPE_BYTES.get((a.dtype or "float").lower(), 4), 0)
            nbytes[i] = -1 if size is None else size
        for key, column in (("nbytes", nbytes), ("hint_code", hint), ("pg_code", pg), ("group_size", gsize.astype(np.int32)),
                            ("seq", seq), ("peer", peer), ("split_code", split)):
            self.parts[key].append(column)

    def finish(self) -> EventColumns:
        """The columns of every chunk added (the builder is emptied)."""
        def joined(key: str, dtype: Any) -> npt.NDArray[Any]:
            parts = self.parts.pop(key)
            out = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
            parts.clear()
            release_free_memory()  # the parts' pages, else kept by the C allocator: the columns would cost twice
            return out

        shapes = [np.concatenate(parts) if parts else np.zeros(0, np.int32) for parts in self.shape_parts]
        self.shape_parts = [[], [], []]
        columns = EventColumns(
            name_values=self.names.values(), cat_values=self.cats.values(), hint_values=self.hints.values(),
            pg_values=self.pgs.values(), split_values=self.splits.values(), groups_seen=dict(self.groups_seen),
            shape_values=[list(table) for table in self.shapes], shape_code=shapes, negative_durations=self.negative)
        for key in _ARRAYS:  # one at a time (see `joined`), each of the dtype of its empty default
            setattr(columns, key, joined(key, getattr(columns, key).dtype))
        return columns


try:
    _TRIM: Callable[[int], int] | None = ctypes.CDLL(None).malloc_trim  # glibc
except (OSError, AttributeError):
    _TRIM = None


def release_free_memory() -> None:
    """Hand the pages the C allocator holds free back to the system (glibc's `malloc_trim`; elsewhere nothing).
    Freed chunks of the heap stay resident otherwise, however large the free space they add up to."""
    if _TRIM is not None:
        _TRIM(0)


_NO_ARGS = EventArgs()  # the args of an event without any
_MAX_GROUPS = 4096  # groups remembered per trace (a 4096-rank job names ~520)
_MAX_RANKS_TEXT = 64 * 1024
_MAX_SPLITS = 4096  # splits kept per side of one all-to-all


def _small_int(value: int | str | None, default: int) -> int:
    """An int32 from an int or a numeric string (kineto writes metadata as text), else `default`."""
    if isinstance(value, str):
        value = ascii_int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        small = int_in(value, -1, INT32_MAX)
        return default if small is None else small
    return default


def _splits_text(in_raw: bytes | msgspec.Raw, out_raw: bytes | msgspec.Raw) -> str:
    """'[[in splits],[out splits]]' from the args' texts ('[1, 2]', or a JSON list), '' when both are empty."""
    sides = []
    for raw in (in_raw, out_raw):
        value: object = []
        if raw:
            try:
                value = msgspec.json.decode(bytes(raw)[:_MAX_RANKS_TEXT])
                if isinstance(value, str):
                    value = msgspec.json.decode(value)
            except (msgspec.DecodeError, UnicodeError):
                value = []
        sides.append([int(v) for v in value[:_MAX_SPLITS] if isinstance(v, int) and not isinstance(v, bool)]
                     if isinstance(value, list) else [])
    return msgspec.json.encode(sides).decode() if any(sides) else ""
