"""Read one Kineto (PyTorch profiler) trace file into typed event records, as much of it as is usable.

Promise: `.json` and `.json.gz` under the per-file cap; a trace cut or damaged anywhere is kept up to its last
complete event (`cut_back` shortens the refused text to it in place and closes it; `ParsedTrace.cut`); unusable
files raise `InputError` naming them; every number is range-checked and timestamps keep every digit; nothing is
evaluated. `read_bytes(path)` reads a file's text within those bounds (the execution-trace reader's too).
Details: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from perftracker.bounded import (
    BLANK_RUN,
    clean_text,
    file_cap,
    inflate,
    read_capped,
    read_head,
    replace_lone_surrogate_escapes,
)
from perftracker.collectors.traces.kineto_columns import ColumnBuilder, EventArgs
from perftracker.collectors.traces.kineto_records import (
    MAX_DUR_NS,
    SURROGATE_NOTE,
    CutReport,
    ParsedTrace,
    RawTraceDoc,
    TraceDoc,
    add_digits,
    add_rows,
    add_typed,
    take_header,
    to_ns,
)
from perftracker.collectors.traces.kineto_stream import (
    EVENTS_START,
    GZIP_MAGIC,
    needs_exact_digits,
    parse_streaming,
)
from perftracker.errors import InputError
from perftracker.values import loose_int

__all__ = ["EventArgs", "ParsedTrace", "TraceDoc", "parse_trace"]
# The tolerant reader builds Python objects for every value (~100 bytes each): this bounds its memory.
MAX_LOOSE_VALUES = 4_000_000
_CHUNK = 1 << 16  # events added to the columns at a time
_T = TypeVar("_T")
_NON_BLANK = re.compile(rb"[^ \t\r\n]")
_ARG_FIELDS = msgspec.structs.fields(EventArgs)


@dataclass
class TraceText:
    """A trace file's JSON text as read: decompressed, under the per-file cap."""

    data: bytearray
    gzip: bool
    whole: bool  # the text is the whole trace (False: a gzip stream cut short, or the cap reached)
    notes: list[str] = field(default_factory=list)
    squeezed: int = 0  # whitespace bytes dropped from long runs as read


def parse_trace(path: Path) -> ParsedTrace:
    """Parse one trace file; what is recovered and what raises: docs/internals/collectors.md."""
    streamed = parse_streaming(path)
    if streamed is not None:
        return streamed
    text = read_bytes(path)
    data = text.data
    trace = ParsedTrace(path=path, notes=text.notes)
    if replace_lone_surrogate_escapes(data):
        trace.notes.append(SURROGATE_NOTE)
    doc = _decode(trace, text)
    data = text.data
    if doc is None:
        _fill_loose(trace, text, path)
        return trace
    take_header(trace, doc.distributedInfo, doc.deviceProperties, doc.baseTimeNanoseconds, doc.host_name)
    builder = ColumnBuilder()
    if needs_exact_digits(data):
        try:
            raw = msgspec.json.decode(data, type=RawTraceDoc)
        except (msgspec.DecodeError, RecursionError):
            _fill_loose(trace, text, path)
            return trace
        del doc
        for at in range(0, len(raw.traceEvents), _CHUNK):
            add_digits(trace, builder, raw.traceEvents[at:at + _CHUNK])
    else:
        del data, text  # the JSON text is not needed any more: free it before building the columns
        for at in range(0, len(doc.traceEvents), _CHUNK):
            add_typed(trace, builder, doc.traceEvents[at:at + _CHUNK])
    trace.columns = builder.finish()
    if trace.cut is not None:
        trace.cut = replace(trace.cut, events_kept=trace.n_events)
    return trace


def read_bytes(path: Path) -> TraceText:
    """The file's JSON text (a bytearray, shortened in place later), decompressed, under the per-file cap, with notes
    about anything left out (over the cap, a gzip cut or corrupt, whitespace squeezed); InputError for a file that
    is not a regular file, is empty, is not JSON, or is a corrupt gzip with nothing before the damage."""
    try:
        capped = read_capped(path, squeeze=read_head(path, 2) != GZIP_MAGIC)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", str(path),
                         "check the path and its permissions") from None
    cap = file_cap()
    notes = [capped.note(cap)] if capped.left_out else []
    text = TraceText(capped.data, gzip=capped.data[:2] == GZIP_MAGIC, whole=not capped.left_out, notes=notes)
    if text.gzip:
        inflated = inflate(capped.data, cap, skip_leading_blank=True, first_bytes=b"{[", squeeze=True)
        del capped
        text.data = inflated.data
        if inflated.error and not inflated.data:
            raise InputError(f"corrupt gzip data ({inflated.error})", str(path),
                             "the file is damaged; re-export or re-copy this rank's trace")
        if inflated.error:
            notes.append(f"the gzip data is corrupt after {len(inflated.data):,} decoded bytes ({inflated.error}); "
                         "using what comes before")
        elif inflated.capped:
            notes.append(f"the decompressed trace reaches perftracker's per-file cap of {cap:,} bytes; reading "
                         "stopped there (a gzip bomb, or a trace bigger than any real one: set "
                         "PERFTRACKER_MAX_FILE_BYTES to raise the cap)")
        elif not inflated.complete:
            notes.append("the gzip stream ends early (file cut off while being written); using what it holds")
        text.whole = text.whole and inflated.complete
        text.squeezed += inflated.squeezed
    text.squeezed += capped.squeezed if not text.gzip else 0
    if text.squeezed:
        notes.append(f"{text.squeezed:,} bytes of whitespace in runs of {BLANK_RUN:,} or more were dropped as read "
                     "(padding, or a bomb; byte counts below are of the text kept)")
    first = _NON_BLANK.search(text.data)
    if first is None:
        raise InputError("the file is empty", str(path),
                         "the profiler did not finish writing it; re-run the profiled steps or drop this file")
    if bytes(text.data[first.start():first.start() + 1]) not in (b"{", b"["):
        raise InputError("this is not JSON (not a PyTorch profiler trace)", str(path),
                         "pass .json or .json.gz files written by torch.profiler")
    return text


def _decode(trace: ParsedTrace, text: TraceText) -> TraceDoc | None:
    """The typed document (None: fields of unusual types, for the loose reader), after recovering a cut."""
    try:
        return _decoded(trace, text, lambda data: msgspec.json.decode(data, type=TraceDoc))
    except msgspec.ValidationError:
        return None


def _decoded(trace: ParsedTrace, text: TraceText, decode: Callable[[bytearray], _T]) -> _T:
    """`decode(text.data)`, once bytes that are not UTF-8 are replaced or the complete events before a cut or
    damage are kept (`_cut`); msgspec.ValidationError passes through, a text still refused raises InputError."""
    try:
        try:
            return decode(text.data)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as exc:
            if _replace_bad_utf8(trace, text):
                return _decoded(trace, text, decode)
            if trace.cut is not None:
                raise _damaged(exc, trace.path) from None
            _cut(trace, text, error_position(str(exc), len(text.data)), exc)
        try:
            return decode(text.data)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as again:  # syntax is whole now: what the decoder still refuses
            raise _damaged(again, trace.path) from None
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


def _damaged(exc: Exception, path: Path) -> InputError:
    return InputError(f"the trace is not valid JSON ({exc})", str(path),
                      "the file is damaged; re-export this rank's trace")


def _cut(trace: ParsedTrace, text: TraceText, error_at: int, exc: Exception) -> None:
    """Keep the complete events before a cut or damage (`text.data` shortened in place). Raises InputError
    when no event before the damage is complete."""
    total = len(text.data)
    used = cut_back(text.data, error_at)
    if used is None:
        if error_at >= total - 1 or not text.whole:
            said = "".join(f"; {n}" for n in text.notes)
            raise InputError(f"the trace is cut off before its first complete event{said}", str(trace.path),
                             "nothing in it can be used; re-export this rank's trace") from None
        raise _damaged(exc, trace.path) from None
    trace.cut = CutReport(events_kept=0, bytes_used=used, bytes_read=total, total_known=text.whole,
                          damaged_at=error_at, gzip=text.gzip)
    trace.bytes_lost = total - used


def _fill_loose(trace: ParsedTrace, text: TraceText, path: Path) -> None:
    """Fallback for traces whose fields have unusual types (strings for ints, ...). Floats stay exact."""
    values = text.data.count(b",") + 1
    if values > MAX_LOOSE_VALUES:
        raise InputError(f"the trace has fields of unusual types (not what torch.profiler writes) and {values:,} "
                         f"values, more than the tolerant reader takes ({MAX_LOOSE_VALUES:,})", str(path),
                         "re-export it with torch.profiler, or split it") from None
    decoder = msgspec.json.Decoder(float_hook=Decimal)
    try:
        raw = _decoded(trace, text, decoder.decode)
    except msgspec.ValidationError as exc:  # msgspec's own limits (an integer of thousands of digits)
        raise InputError(f"the trace holds a value out of range ({exc})", str(path),
                         "the file is damaged or not from torch.profiler; re-export this rank's trace") from None
    if isinstance(raw, list):  # bare Chrome-trace array
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise InputError("this JSON is not a PyTorch profiler trace (no traceEvents list)", str(path),
                         "pass the files written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)")
    take_header(trace, raw.get("distributedInfo"), raw.get("deviceProperties"), raw.get("baseTimeNanoseconds"),
                 raw.get("host_name"))
    builder = ColumnBuilder()
    rows: list[tuple[Any, ...]] = []
    for e in raw["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ts = to_ns(e.get("ts"))
        if ts is None:
            trace.dropped += 1
            continue
        pid, tid, args = e.get("pid"), e.get("tid"), e.get("args")
        rows.append((clean_text(str(e.get("name", ""))), clean_text(str(e.get("cat", ""))), str(e.get("ph", "")),
                     pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else None,
                     tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None,
                     ts, to_ns(e.get("dur"), MAX_DUR_NS) or 0, _loose_args(args) if isinstance(args, dict) else None))
        if len(rows) >= _CHUNK:
            add_rows(builder, rows)
            rows.clear()
    add_rows(builder, rows)
    trace.columns = builder.finish()
    if trace.cut is not None:
        trace.cut = replace(trace.cut, events_kept=trace.n_events)


def _loose_args(args: dict[str, Any]) -> EventArgs:
    """The args as the typed reader's fields: numbers as loose ints, text as text, JSON values kept (None
    where a key is absent or holds no such value)."""
    values: dict[str, Any] = {}
    for f in _ARG_FIELDS:
        value = args.get(f.encode_name)
        if f.type is msgspec.Raw:
            if f.encode_name in args:
                values[f.name] = msgspec.Raw(msgspec.json.encode(value))
        elif f.name == "pg_name":
            values[f.name] = value if isinstance(value, (str, int)) and not isinstance(value, bool) else None
        elif f.type == (str | None):
            values[f.name] = str(value) if f.encode_name in args else None
        else:
            values[f.name] = loose_int(value)
    return EventArgs(**values)


_WINDOW = 4 * 1024 * 1024  # where a cut after the events array is looked for
_TRIES = 16  # closings tried
_BRACES = 100_000  # `}` looked at, however far back (a run of whitespace or junk may separate them)
# The end of an event: `}` followed by the next event, the end of the events array, or the cut itself.
_EVENT_END = re.compile(rb"\}(?=\s*(?:,\s*(?:\{|\Z)|\]|\Z))")
_ARRAY_END = re.compile(rb"\}\s*\]\s*,")
_TOP_KEY = re.compile(rb',(?=\s*")')
_BYTE_AT = re.compile(r"\(byte (\d+)\)")


class _Syntax(msgspec.Struct):
    """Checks a whole trace's syntax while building nothing."""

    traceEvents: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))


def error_position(message: str, size: int) -> int:
    """Where the decoder stopped: the byte its message names, else the end (a truncated text)."""
    match = _BYTE_AT.search(message)
    return min(int(match.group(1)), size) if match and len(match.group(1)) < 19 else size


def _complete(candidate: bytearray | memoryview) -> bool:
    try:
        doc = msgspec.json.decode(candidate, type=_Syntax)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    return bytes(memoryview(doc.traceEvents)[:1]) == b"["


def cut_back(data: bytearray, error_at: int) -> int | None:
    """Shorten `data` in place to its last complete event before `error_at`, the JSON closed (brackets added);
    how many bytes of the original text the kept part uses, None when no event before `error_at` is complete."""
    start = EVENTS_START.search(data)
    if start is None or error_at <= start.end():
        return None
    kept = _keep_trailing_keys(data, max(start.end(), error_at - _WINDOW), error_at)
    if kept is not None:
        return kept
    pos, tries = error_at, 0
    for _ in range(_BRACES):
        pos = data.rfind(b"}", start.end(), pos)
        if pos < 0 or tries >= _TRIES:
            break
        if _EVENT_END.match(data, pos, error_at) is None:
            continue
        tries += 1
        del data[pos + 1:]  # only ever shortened further: the next try is an earlier event
        data += b"]}"
        error_at = pos + 1
        if _complete(data):
            return pos + 1
    return None


def _keep_trailing_keys(data: bytearray, window_from: int, error_at: int) -> int | None:
    """When the events array closed before the cut, close the JSON after its last complete top-level key."""
    closes = [m.end() for m in _ARRAY_END.finditer(data, window_from, error_at)]
    if not closes:
        return None
    commas = [m.start() for m in _TOP_KEY.finditer(data, closes[-1] - 1, error_at)]
    for comma in reversed(commas[-_TRIES:]):
        tail = bytes(data[comma:error_at])  # within the window: small
        data[comma:error_at] = b"}"
        with memoryview(data) as view, view[:comma + 1] as head:
            complete = _complete(head)
        if complete:
            del data[comma + 1:]
            return comma
        data[comma:comma + 1] = tail
    return None
