"""Read one Kineto (PyTorch profiler) trace file into typed event records, as much of it as is usable.

Promises:
- `.json` and `.json.gz`; a gzip stream cut off mid-write yields the bytes it holds.
- A trace cut off mid-write is recovered up to its last complete event, with a note saying how much
  was lost. An empty file, a corrupt gzip or JSON that is not a trace raises `InputError` naming the
  file.
- Timestamps keep every digit: when the file writes epoch-magnitude microseconds with a fraction
  (which a float64 cannot hold to the nanosecond), the raw digits are parsed instead.
- Trace content is data: nothing in it is evaluated.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from perftracker.errors import InputError


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


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = 0.0
    args: EventArgs | None = None


class RawEvent(msgspec.Struct, gc=False):
    """Same as Event, with ts/dur as raw JSON text so no digit is lost."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))
    dur: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))
    args: EventArgs | None = None


class TraceDoc(msgspec.Struct):
    traceEvents: list[Event]
    distributedInfo: dict[str, Any] | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    baseTimeNanoseconds: int | None = None
    host_name: str | None = None
    schemaVersion: int | None = None


class RawTraceDoc(msgspec.Struct):
    traceEvents: list[RawEvent]


@dataclass
class ParsedTrace:
    """Events with ts/dur already in integer nanoseconds (as the trace wrote them).

    One entry per event in each list and in the int64 arrays `ts_ns_array` / `dur_ns_array`
    (`ts_ns` / `dur_ns` give those as lists of int).
    """

    path: Path
    names: list[str] = field(default_factory=list)
    cats: list[str] = field(default_factory=list)
    phs: list[str] = field(default_factory=list)
    pids: list[int | str | None] = field(default_factory=list)
    tids: list[int | str | None] = field(default_factory=list)
    ts_ns_array: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dur_ns_array: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    args: list[EventArgs | None] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    base_ns: int | None = None
    host_name: str | None = None
    bytes_lost: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ts_ns(self) -> list[int]:
        values: list[int] = self.ts_ns_array.tolist()
        return values

    @property
    def dur_ns(self) -> list[int]:
        values: list[int] = self.dur_ns_array.tolist()
        return values


def read_bytes(path: Path) -> tuple[bytes, list[str]]:
    """The file's JSON bytes (decompressed), plus notes about a cut-off gzip stream."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", str(path),
                         "check the path and its permissions") from None
    notes: list[str] = []
    if data[:2] == b"\x1f\x8b":
        # A complete stream ends with its size (mod 2**32): decompress into one buffer of that size.
        size_hint = int.from_bytes(data[-4:], "little")
        out = None
        if 0 < size_hint <= 64 * len(data) + (1 << 20):
            try:
                out = zlib.decompress(data, 31, size_hint)
            except zlib.error:
                pass  # cut off or corrupt: the stream decoder below says which
        if out is None:
            decomp = zlib.decompressobj(wbits=31)
            try:
                out = decomp.decompress(data)
            except zlib.error as exc:
                raise InputError(f"corrupt gzip data ({exc})", str(path),
                                 "the file is damaged; re-export or re-copy this rank's trace") from None
            if not decomp.eof:
                notes.append("the gzip stream ends early (file cut off while being written); using what it holds")
        data = out
    if not data.strip():
        raise InputError("the file is empty", str(path),
                         "the profiler did not finish writing it; re-run the profiled steps or drop this file")
    return data, notes


def parse_trace(path: Path) -> ParsedTrace:
    """Parse one trace file; see the module docstring for what is recovered and what raises."""
    data, notes = read_bytes(path)
    total = len(data)
    trace = ParsedTrace(path=path, notes=notes)
    try:
        doc: TraceDoc | None = msgspec.json.decode(data, type=TraceDoc)
    except msgspec.ValidationError:
        doc = None
    except msgspec.DecodeError as exc:
        if "truncated" not in str(exc).lower():
            _explain_not_a_trace(data, path, exc)
        cut = _recover(data)
        if cut is None:
            raise InputError("the trace is cut off before its first complete event", str(path),
                             "nothing in it can be used; re-export this rank's trace") from None
        data, doc = cut
        trace.bytes_lost = max(0, total - len(data) + 2)
        notes.append(f"the trace is cut off mid-write; recovered {len(doc.traceEvents) if doc else 0} complete "
                     f"events, lost the last {trace.bytes_lost} bytes "
                     f"({100.0 * trace.bytes_lost / total:.1f}% of the file)")
    if doc is None:
        _fill_loose(trace, data, path)
        return trace
    trace.distributed_info = dict(doc.distributedInfo or {})
    trace.device_properties = list(doc.deviceProperties or [])
    trace.base_ns = doc.baseTimeNanoseconds
    trace.host_name = doc.host_name
    if _needs_exact_digits(data):
        try:
            raw = msgspec.json.decode(data, type=RawTraceDoc)
        except msgspec.ValidationError:
            _fill_loose(trace, data, path)
            return trace
        _fill_from_digits(trace, raw)
    else:
        del data  # the JSON text is not needed any more: free it before building the columns
        _fill_events(trace, doc)
    return trace


# A timestamp of 13+ integer digits (>= 1e12 us, past what float64 resolves to 1 ns) with a fraction.
_LOSSY_TS = re.compile(rb'"ts"\s*:\s*-?\d{13,}\.\d')


def _needs_exact_digits(data: bytes) -> bool:
    return _LOSSY_TS.search(data) is not None


def _fill_loose(trace: ParsedTrace, data: bytes, path: Path) -> None:
    """Fallback for traces whose fields have unusual types (strings for ints, ...). Floats stay exact."""
    try:
        raw = msgspec.json.Decoder(float_hook=Decimal).decode(data)
    except msgspec.DecodeError as exc:
        _explain_not_a_trace(data, path, exc)
        raise
    if isinstance(raw, list):  # bare Chrome-trace array
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise InputError("this JSON is not a PyTorch profiler trace (no traceEvents list)", str(path),
                         "pass the files written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)")
    dist = raw.get("distributedInfo")
    props = raw.get("deviceProperties")
    base = raw.get("baseTimeNanoseconds")
    host = raw.get("host_name")
    trace.distributed_info = dist if isinstance(dist, dict) else {}
    trace.device_properties = props if isinstance(props, list) else []
    trace.base_ns = base if isinstance(base, int) and not isinstance(base, bool) else None
    trace.host_name = host if isinstance(host, str) else None
    ts_ns: list[int] = []
    dur_ns: list[int] = []
    for e in raw["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ts = _to_ns(e.get("ts"))
        if ts is None:
            continue
        pid, tid = e.get("pid"), e.get("tid")
        trace.names.append(str(e.get("name", "")))
        trace.cats.append(str(e.get("cat", "")))
        trace.phs.append(str(e.get("ph", "")))
        trace.pids.append(pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else None)
        trace.tids.append(tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None)
        ts_ns.append(ts)
        dur_ns.append(_to_ns(e.get("dur")) or 0)
        args = e.get("args")
        trace.args.append(_loose_args(args) if isinstance(args, dict) else None)
    trace.ts_ns_array = np.array(ts_ns, dtype=np.int64)
    trace.dur_ns_array = np.array(dur_ns, dtype=np.int64)


def _to_ns(value: Any) -> int | None:
    """Microseconds (int, exact Decimal, or numeric string) -> integer nanoseconds."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, Decimal):
        return int((value * 1000).to_integral_value()) if value.is_finite() else None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) * 1000 if value.is_integer() else round(value * 1000.0)
    if isinstance(value, str):
        try:
            return _to_ns(Decimal(value.strip()))
        except InvalidOperation:
            return None
    return None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (float, Decimal)):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _loose_args(args: dict[str, Any]) -> EventArgs:
    pg = args.get("Process Group Name")
    return EventArgs(
        stream=_as_int(args.get("stream")),
        device=_as_int(args.get("device")),
        correlation=_as_int(args.get("correlation")),
        external_id=_as_int(args.get("External id")),
        collective_name=str(args["Collective name"]) if "Collective name" in args else None,
        in_msg_nelems=_as_int(args.get("In msg nelems")),
        out_msg_nelems=_as_int(args.get("Out msg nelems")),
        group_size=_as_int(args.get("Group size")),
        pg_name=pg if isinstance(pg, (str, int)) and not isinstance(pg, bool) else None,
        dtype=str(args["dtype"]) if "dtype" in args else None,
        nbytes=_as_int(args.get("bytes")),
    )


def _explain_not_a_trace(data: bytes, path: Path, exc: Exception) -> None:
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        raise InputError("this is not JSON (not a PyTorch profiler trace)", str(path),
                         "pass .json or .json.gz files written by torch.profiler") from None
    raise InputError(f"the trace is not valid JSON ({exc})", str(path),
                     "the file is damaged; re-export this rank's trace") from None


# A boundary between two events: the end of one object and the start of the next.
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')


def _recover(data: bytes) -> tuple[bytes, TraceDoc] | None:
    """Cut a truncated trace after its last complete event and close the JSON."""
    start = _EVENTS_START.search(data)
    if start is None:
        return None
    tail_from = max(start.end(), len(data) - 4 * 1024 * 1024)
    boundaries = [m.start() for m in _EVENT_BOUNDARY.finditer(data, tail_from)]
    for pos in reversed(boundaries[-16:]):
        candidate = data[: pos + 1] + b"]}"
        try:
            return candidate, msgspec.json.decode(candidate, type=TraceDoc)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    # The first event itself may be the only complete one.
    head = data[: start.end()] + b"]}"
    try:
        doc = msgspec.json.decode(head, type=TraceDoc)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return (head, doc) if doc.traceEvents else None


def _fill_events(trace: ParsedTrace, doc: TraceDoc) -> None:
    names, cats, phs, pids, tids, argss = trace.names, trace.cats, trace.phs, trace.pids, trace.tids, trace.args
    tss: list[float | None] = []
    durs: list[float | None] = []
    add_name, add_cat, add_ph, add_pid, add_tid, add_ts, add_dur, add_args = (
        names.append, cats.append, phs.append, pids.append, tids.append, tss.append, durs.append, argss.append)
    for e in doc.traceEvents:  # one pass, timestamps converted below in bulk
        add_name(e.name)
        add_cat(e.cat)
        add_ph(e.ph)
        add_pid(e.pid)
        add_tid(e.tid)
        add_ts(e.ts)
        add_dur(e.dur)
        add_args(e.args)
    try:
        ts_us = np.fromiter(tss, dtype=np.float64, count=len(tss))
    except TypeError:  # events without a timestamp are dropped
        keep = [i for i, ts in enumerate(tss) if ts is not None]
        columns: tuple[list[Any], ...] = (names, cats, phs, pids, tids, tss, durs, argss)
        for column in columns:
            column[:] = [column[i] for i in keep]
        ts_us = np.fromiter(tss, dtype=np.float64, count=len(tss))
    try:
        dur_us = np.fromiter(durs, dtype=np.float64, count=len(durs))
    except TypeError:  # "dur": null
        dur_us = np.fromiter((0.0 if d is None else d for d in durs), dtype=np.float64, count=len(durs))
    trace.ts_ns_array = _us_to_ns(ts_us)
    trace.dur_ns_array = _us_to_ns(dur_us)


_VECTOR_US_LIMIT = 9.2e15  # below it, us * 1000 fits an int64 and numpy converts exactly like `_float_ns`


def _float_ns(us: float) -> int:
    return int(us) * 1000 if us.is_integer() else round(us * 1000.0)


def _us_to_ns(us: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Float microseconds -> integer nanoseconds: whole values exactly, others rounded half to even."""
    if not (np.abs(us) < _VECTOR_US_LIMIT).all():  # huge or infinite: one by one, as Python does
        return np.array([_float_ns(v) for v in us.tolist()], dtype=np.int64)
    whole = us == np.floor(us)
    ns: npt.NDArray[np.int64] = np.where(whole, us.astype(np.int64) * 1000, np.rint(us * 1000.0).astype(np.int64))
    return ns


def _digits_to_ns(raw: bytes) -> int:
    """'1682725898236567.123' (microseconds) -> 1682725898236567123 nanoseconds, exactly."""
    ns = _to_ns(raw.decode("ascii", "replace"))
    return ns if ns is not None else 0


def _fill_from_digits(trace: ParsedTrace, doc: RawTraceDoc) -> None:
    ts_ns: list[int] = []
    dur_ns: list[int] = []
    for e in doc.traceEvents:
        if not e.ts:
            continue
        trace.names.append(e.name)
        trace.cats.append(e.cat)
        trace.phs.append(e.ph)
        trace.pids.append(e.pid)
        trace.tids.append(e.tid)
        ts_ns.append(_digits_to_ns(bytes(e.ts)))
        dur_ns.append(_digits_to_ns(bytes(e.dur)) if e.dur else 0)
        trace.args.append(e.args)
    trace.ts_ns_array = np.array(ts_ns, dtype=np.int64)
    trace.dur_ns_array = np.array(dur_ns, dtype=np.int64)
