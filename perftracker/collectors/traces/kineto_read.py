"""Read one Kineto (PyTorch profiler) trace file into typed event records, as much of it as is usable.

Promises:
- `.json` and `.json.gz`, read under the per-file cap (`perftracker.bounded`: regular files only, gzip
  inflated in chunks); a gzip stream cut off mid-write yields the bytes it holds.
- A trace cut off (or damaged) anywhere is recovered up to its last complete event whatever the
  decoder's error says (`kineto_cut`), with `ParsedTrace.cut` saying what was kept and lost. An empty
  file, a corrupt gzip with nothing before the damage, or JSON that is not a trace raises
  `InputError` naming the file.
- Every number is range-checked before it becomes a column: events whose timestamp is not a number
  or out of range are dropped (counted in `dropped`), durations out of range are 0 (`bad_durations`).
- Timestamps keep every digit: when the file writes epoch-magnitude microseconds with a fraction
  (which a float64 cannot hold to the nanosecond), the raw digits are parsed instead.
- Trace content is data: nothing in it is evaluated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from perftracker.bounded import clean_text, replace_lone_surrogate_escapes
from perftracker.collectors.traces.kineto_cut import CutReport, cut_back, error_position
from perftracker.collectors.traces.kineto_text import TraceText, read_bytes
from perftracker.errors import InputError
from perftracker.values import ascii_int, int_in

# Times in ns beyond these are not a trace's (year 2115 in epoch ns): bounded so that start + duration,
# and a base time plus either, still fit int64.
MAX_TS_NS = 4 * 10**18
MAX_DUR_NS = 10**18
MAX_BASE_NS = 4 * 10**18
# The tolerant reader builds Python objects for every value (~100 bytes each): this bounds its memory.
MAX_LOOSE_VALUES = 4_000_000
NO_RAW = msgspec.Raw(b"")  # an absent JSON value
_SHAPE_KEYS = (("input_dims", "Input Dims"), ("input_type", "Input type"), ("concrete_inputs", "Concrete Inputs"))


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
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")  # an op's shapes, kept as JSON text
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=NO_RAW, name="Concrete Inputs")


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
    cut: CutReport | None = None  # set when the trace stops being readable before its end
    dropped: int = 0  # events without a usable timestamp (none, not a number, out of range)
    bad_durations: int = 0  # durations out of range or not numbers, taken as 0
    utf8_fixed: bool = False  # bytes that are not UTF-8 were already replaced

    def messages(self) -> list[tuple[str, dict[str, Any]]]:
        """What the user should know about how this file was read: (message, data) pairs."""
        said: list[tuple[str, dict[str, Any]]] = [(n, {}) for n in self.notes]
        if self.cut is not None:
            said.append((self.cut.message(), self.cut.data()))
        if self.dropped:
            said.append((f"{self.dropped:,} event(s) without a usable timestamp (missing, not a number, or out of "
                         "range) were left out", {"events_dropped": self.dropped}))
        if self.bad_durations:
            said.append((f"{self.bad_durations:,} event duration(s) out of range or not numbers were taken as 0",
                         {"bad_durations": self.bad_durations}))
        return said

    @property
    def ts_ns(self) -> list[int]:
        values: list[int] = self.ts_ns_array.tolist()
        return values

    @property
    def dur_ns(self) -> list[int]:
        values: list[int] = self.dur_ns_array.tolist()
        return values


def parse_trace(path: Path) -> ParsedTrace:
    """Parse one trace file; see the module docstring for what is recovered and what raises."""
    text = read_bytes(path)
    data = text.data
    trace = ParsedTrace(path=path, notes=text.notes)
    if replace_lone_surrogate_escapes(data):
        trace.notes.append("text with lone UTF-16 surrogates (\\ud800 without its pair) was read as U+FFFD")
    doc = _decode(trace, text)
    data = text.data
    if doc is None:
        _fill_loose(trace, text, path)
        return trace
    _take_header(trace, doc.distributedInfo, doc.deviceProperties, doc.baseTimeNanoseconds, doc.host_name)
    if _needs_exact_digits(data):
        try:
            raw = msgspec.json.decode(data, type=RawTraceDoc)
        except (msgspec.DecodeError, RecursionError):
            _fill_loose(trace, text, path)
            return trace
        _fill_from_digits(trace, raw)
    else:
        del data, text  # the JSON text is not needed any more: free it before building the columns
        _fill_events(trace, doc)
    if trace.cut is not None:
        trace.cut = replace(trace.cut, events_kept=len(trace.names))
    return trace


def _decode(trace: ParsedTrace, text: TraceText) -> TraceDoc | None:
    """The typed document (None: fields of unusual types, for the loose reader), after recovering a cut."""
    total = len(text.data)
    try:
        return msgspec.json.decode(text.data, type=TraceDoc)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError as exc:
        if _replace_bad_utf8(trace, text):
            return _decode(trace, text)
        return _recover(trace, text, error_position(str(exc), total), total, exc)
    except RecursionError:
        raise InputError("the trace is nested too deeply to be a profiler trace", str(trace.path),
                         "pass the files written by torch.profiler") from None


def _replace_bad_utf8(trace: ParsedTrace, text: TraceText) -> bool:
    """Replace bytes that are not UTF-8 by U+FFFD (once; True when there were any)."""
    if trace.utf8_fixed:
        return False
    trace.utf8_fixed = True
    try:
        bytes(text.data).decode("utf-8")
    except UnicodeDecodeError:
        text.data = bytearray(bytes(text.data).decode("utf-8", "replace").encode("utf-8"))
        trace.notes.append("bytes that are not UTF-8 were read as U+FFFD")
        return True
    return False


def _recover(trace: ParsedTrace, text: TraceText, error_at: int, total: int, exc: Exception) -> TraceDoc | None:
    """Keep the complete events before a cut or damage (`text.data` shortened in place); None when the
    kept part needs the loose reader. Raises InputError when no event before the damage is complete."""
    used = cut_back(text.data, error_at)
    if used is None:
        if error_at >= total - 1 or not text.whole:
            said = "".join(f"; {n}" for n in text.notes)
            raise InputError(f"the trace is cut off before its first complete event{said}", str(trace.path),
                             "nothing in it can be used; re-export this rank's trace") from None
        raise InputError(f"the trace is not valid JSON ({exc})", str(trace.path),
                         "the file is damaged; re-export this rank's trace") from None
    trace.cut = CutReport(events_kept=0, bytes_used=used, bytes_read=total, total_known=text.whole,
                          damaged_at=error_at, gzip=text.gzip)
    trace.bytes_lost = total - used
    try:
        return msgspec.json.decode(text.data, type=TraceDoc)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError as again:  # syntax is whole now: what the typed decoder still refuses
        raise InputError(f"the trace is not valid JSON ({again})", str(trace.path),
                         "the file is damaged; re-export this rank's trace") from None


def _take_header(trace: ParsedTrace, dist: Any, props: Any, base: Any, host: Any) -> None:
    """The trace's own facts, each kept only when it has the shape and range a trace gives it."""
    trace.distributed_info = dict(dist) if isinstance(dist, dict) else {}
    trace.device_properties = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    trace.base_ns = int_in(base, 1, MAX_BASE_NS)
    trace.host_name = clean_text(host) if isinstance(host, str) else None

# A timestamp of 13+ integer digits (>= 1e12 us, past what float64 resolves to 1 ns) with a fraction.
_LOSSY_TS = re.compile(rb'"ts"\s*:\s*-?\d{13,}\.\d')


def _needs_exact_digits(data: bytes | bytearray) -> bool:
    return _LOSSY_TS.search(data) is not None


def _fill_loose(trace: ParsedTrace, text: TraceText, path: Path) -> None:
    """Fallback for traces whose fields have unusual types (strings for ints, ...). Floats stay exact."""
    values = text.data.count(b",") + 1
    if values > MAX_LOOSE_VALUES:
        raise InputError(f"the trace has fields of unusual types (not what torch.profiler writes) and {values:,} "
                         f"values, more than the tolerant reader takes ({MAX_LOOSE_VALUES:,})", str(path),
                         "re-export it with torch.profiler, or split it") from None
    decoder = msgspec.json.Decoder(float_hook=Decimal)
    try:
        try:
            raw = decoder.decode(text.data)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as exc:
            if _replace_bad_utf8(trace, text):
                _fill_loose(trace, text, path)
                return
            if trace.cut is not None:
                raise InputError(f"the trace is not valid JSON ({exc})", str(path),
                                 "the file is damaged; re-export this rank's trace") from None
            total = len(text.data)
            _recover(trace, text, error_position(str(exc), total), total, exc)
            try:
                raw = decoder.decode(text.data)
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError as again:
                raise InputError(f"the trace is not valid JSON ({again})", str(path),
                                 "the file is damaged; re-export this rank's trace") from None
    except msgspec.ValidationError as exc:  # msgspec's own limits (an integer of thousands of digits)
        raise InputError(f"the trace holds a value out of range ({exc})", str(path),
                         "the file is damaged or not from torch.profiler; re-export this rank's trace") from None
    except RecursionError:
        raise InputError("the trace is nested too deeply to be a profiler trace", str(path),
                         "pass the files written by torch.profiler") from None
    if isinstance(raw, list):  # bare Chrome-trace array
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise InputError("this JSON is not a PyTorch profiler trace (no traceEvents list)", str(path),
                         "pass the files written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)")
    _take_header(trace, raw.get("distributedInfo"), raw.get("deviceProperties"), raw.get("baseTimeNanoseconds"),
                 raw.get("host_name"))
    ts_ns: list[int] = []
    dur_ns: list[int] = []
    for e in raw["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ts = _to_ns(e.get("ts"))
        if ts is None:
            trace.dropped += 1
            continue
        pid, tid = e.get("pid"), e.get("tid")
        trace.names.append(clean_text(str(e.get("name", ""))))
        trace.cats.append(clean_text(str(e.get("cat", ""))))
        trace.phs.append(str(e.get("ph", "")))
        trace.pids.append(pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else None)
        trace.tids.append(tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None)
        ts_ns.append(ts)
        dur_ns.append(_to_ns(e.get("dur"), MAX_DUR_NS) or 0)
        args = e.get("args")
        trace.args.append(_loose_args(args) if isinstance(args, dict) else None)
    trace.ts_ns_array = np.array(ts_ns, dtype=np.int64)
    trace.dur_ns_array = np.array(dur_ns, dtype=np.int64)
    if trace.cut is not None:
        trace.cut = replace(trace.cut, events_kept=len(trace.names))


def _to_ns(value: Any, limit: int = MAX_TS_NS) -> int | None:
    """Microseconds (int, exact Decimal, or numeric string) -> integer nanoseconds; None past +-`limit`."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        ns = value * 1000 if -limit <= value <= limit else None
    elif isinstance(value, Decimal):
        if not value.is_finite() or value.adjusted() > 18:  # int() of 1e999999 would take forever
            return None
        ns = int((value * 1000).to_integral_value())
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) > limit:
            return None
        ns = int(value) * 1000 if value.is_integer() else round(value * 1000.0)
    elif isinstance(value, str):
        try:
            return _to_ns(Decimal(value.strip()[:64]), limit)
        except InvalidOperation:
            return None
    else:
        return None
    return ns if ns is not None and -limit <= ns <= limit else None


def _as_int(value: Any) -> int | None:
    """An int64 from an int, an integral float or Decimal, or a numeric string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int_in(value)
    if isinstance(value, (float, Decimal)):
        if not math.isfinite(value) or not -(2**63) < value < 2**63:
            return None
        return int(value)
    if isinstance(value, str):
        return ascii_int(value.strip())
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
        **{attr: msgspec.Raw(msgspec.json.encode(args[key])) for attr, key in _SHAPE_KEYS if key in args},
    )


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
    ts_us = _floats(tss)
    usable = np.isfinite(ts_us) & (np.abs(ts_us) <= MAX_TS_NS / 1000)
    if not usable.all():  # events without a usable timestamp are dropped
        keep = np.flatnonzero(usable).tolist()
        trace.dropped += len(tss) - len(keep)
        columns: tuple[list[Any], ...] = (names, cats, phs, pids, tids, durs, argss)
        for column in columns:
            column[:] = [column[i] for i in keep]
        ts_us = ts_us[usable]
    dur_us = _floats(durs, none=0.0)
    bad_dur = ~(np.isfinite(dur_us) & (np.abs(dur_us) <= MAX_DUR_NS / 1000))
    if bad_dur.any():
        trace.bad_durations += int(bad_dur.sum())
        dur_us[bad_dur] = 0.0
    trace.ts_ns_array = _us_to_ns(ts_us)
    trace.dur_ns_array = _us_to_ns(dur_us)


def _floats(values: list[float | None], none: float = math.nan) -> npt.NDArray[np.float64]:
    """A float64 array of `values`, `none` for None."""
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except TypeError:
        return np.fromiter((none if v is None else v for v in values), dtype=np.float64, count=len(values))


def _us_to_ns(us: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Float microseconds (finite, within MAX_TS_NS) -> integer nanoseconds: whole values exactly, others
    rounded half to even (as Python's round(us * 1000.0))."""
    whole = us == np.floor(us)
    ns: npt.NDArray[np.int64] = np.where(whole, us.astype(np.int64) * 1000, np.rint(us * 1000.0).astype(np.int64))
    return ns


def _digits_to_ns(raw: bytes, limit: int = MAX_TS_NS) -> int | None:
    """'1682725898236567.123' (microseconds) -> 1682725898236567123 nanoseconds, exactly (None: not a time)."""
    return _to_ns(raw.decode("ascii", "replace"), limit)


def _fill_from_digits(trace: ParsedTrace, doc: RawTraceDoc) -> None:
    ts_ns: list[int] = []
    dur_ns: list[int] = []
    for e in doc.traceEvents:
        ts = _digits_to_ns(bytes(e.ts)) if e.ts else None
        if ts is None:
            trace.dropped += 1
            continue
        dur = _digits_to_ns(bytes(e.dur), MAX_DUR_NS) if e.dur else 0
        if dur is None:
            trace.bad_durations += 1
        trace.names.append(e.name)
        trace.cats.append(e.cat)
        trace.phs.append(e.ph)
        trace.pids.append(e.pid)
        trace.tids.append(e.tid)
        ts_ns.append(ts)
        dur_ns.append(dur or 0)
        trace.args.append(e.args)
    trace.ts_ns_array = np.array(ts_ns, dtype=np.int64)
    trace.dur_ns_array = np.array(dur_ns, dtype=np.int64)
