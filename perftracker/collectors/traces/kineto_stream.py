"""Read a well-formed Kineto trace streaming: the text in blocks, its events decoded a chunk at a time.

Promise: `parse_streaming(path)` gives the same `ParsedTrace` as reading the whole text (`kineto_read`) while
holding only a few MB of text and one chunk of events at a time, or None, having built nothing, whenever the
whole-text reader must decide. When that is: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec

from perftracker.bounded import BLANK_RUN, TO_SPACE, file_cap, open_regular, replace_lone_surrogate_escapes
from perftracker.collectors.traces.kineto_columns import ColumnBuilder
from perftracker.collectors.traces.kineto_records import (
    SURROGATE_NOTE,
    Event,
    ParsedTrace,
    RawEvent,
    TraceDoc,
    add_digits,
    add_typed,
    take_header,
)
from perftracker.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 1 << 20  # events text decoded at a time
_READ = 1 << 20  # bytes read from the file at a time
_INFLATE = 1 << 20
_MAX_HEAD = 64 << 20  # text before `traceEvents` (and after it) that a trace may hold
_MAX_EVENT = 64 << 20  # a chunk that grows past this without decoding is damage: the whole-text reader decides
_TRIES = 8  # chunk ends tried, last first
_LOOK = 100_000  # `}` looked at for them
_BLANK = re.compile(rb"[ \t\r\n]*")
EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
# A timestamp of 13+ integer digits (>= 1e12 us, past what float64 resolves to 1 ns) with a fraction
# (possessive: a digit is never a '.', so giving one back cannot match; it only saves the retries).
_LOSSY_TS = re.compile(rb'"ts"\s*+:\s*+-?\d{13,}+\.\d')


def needs_exact_digits(data: bytes | bytearray) -> bool:
    return _LOSSY_TS.search(data) is not None


class NotStreamable(Exception):
    """The trace needs the whole-text reader."""


class _NeedDigits(Exception):
    """A timestamp a float cannot hold: decode again with the exact digits."""


class _Syntax(msgspec.Struct):
    """Checks a JSON object's syntax while building nothing."""


def parse_streaming(path: Path) -> ParsedTrace | None:
    """The trace at `path` read streaming, or None when the whole-text reader must read it."""
    for digits in (False, True):
        try:
            return _parse(path, digits)
        except _NeedDigits:
            continue
        except (NotStreamable, InputError, OSError, RecursionError):
            return None
    return None


def _parse(path: Path, digits: bool) -> ParsedTrace:
    trace = ParsedTrace(path=path)
    builder = ColumnBuilder()
    surrogates = 0

    def on_events(chunk: bytearray) -> None:
        nonlocal surrogates
        replaced = replace_lone_surrogate_escapes(chunk)
        if not digits and needs_exact_digits(chunk):
            raise _NeedDigits
        try:
            if digits:
                msgspec.json.decode(chunk, type=list[Event])  # what the typed reader refuses, the tolerant one reads
                add_digits(trace, builder, msgspec.json.decode(chunk, type=list[RawEvent]))
            else:
                add_typed(trace, builder, msgspec.json.decode(chunk, type=list[Event]))
        except msgspec.ValidationError:
            raise NotStreamable from None
        surrogates += replaced

    def on_head(head: bytes) -> None:
        if not digits and needs_exact_digits(head):
            raise _NeedDigits

    head, tail = split_events(text_blocks(path), on_head, on_events)
    if not digits and needs_exact_digits(tail):
        raise _NeedDigits
    rest = bytearray(head + b'"traceEvents":[]' + tail)
    surrogates += replace_lone_surrogate_escapes(rest)
    try:
        doc = msgspec.json.decode(rest, type=TraceDoc)
    except (msgspec.DecodeError, RecursionError):
        raise NotStreamable from None
    take_header(trace, doc.distributedInfo, doc.deviceProperties, doc.baseTimeNanoseconds, doc.host_name)
    if surrogates:
        trace.notes.append(SURROGATE_NOTE)
    trace.columns = builder.finish()
    return trace


def text_blocks(path: Path) -> Iterator[bytes]:
    """The file's JSON text (gzip inflated) in blocks; NotStreamable when the whole-text reader would cap,
    squeeze or note anything."""
    cap = file_cap()
    with open_regular(path) as handle:
        first = handle.read(2)
        blocks = _inflated(handle, first, cap) if first == GZIP_MAGIC else _plain(handle, first, cap)
        tail = b""
        for block in blocks:
            if (tail + block).translate(TO_SPACE).find(b" " * BLANK_RUN) >= 0:
                raise NotStreamable  # a run the reader squeezes (and notes)
            tail = block[-(BLANK_RUN - 1):]
            yield block


def _plain(handle: BinaryIO, first: bytes, cap: int) -> Iterator[bytes]:
    read = len(first)
    yield first
    while block := handle.read(_READ):
        read += len(block)
        if read >= cap:
            raise NotStreamable
        yield block


def _inflated(handle: BinaryIO, first: bytes, cap: int) -> Iterator[bytes]:
    stream = zlib.decompressobj(wbits=31)
    read, decoded = len(first), 0
    pending = first
    try:
        while not stream.eof:
            if not pending:
                pending = handle.read(_READ)
                if not pending:
                    raise NotStreamable  # the stream ends early
                read += len(pending)
                if read >= cap:
                    raise NotStreamable
            out = stream.decompress(pending, _INFLATE)
            pending = stream.unconsumed_tail
            decoded += len(out)
            if decoded >= cap:
                raise NotStreamable
            if out:
                yield out
    except zlib.error:
        raise NotStreamable from None


def split_events(blocks: Iterator[bytes], on_head: Callable[[bytes], None],
                 on_events: Callable[[bytearray], None]) -> tuple[bytes, bytes]:
    """Feed `on_events` the `traceEvents` array a chunk at a time (each chunk `[...]`, whole events);
    return (the text before the key, the text after the array). `on_events` raises msgspec.DecodeError
    for a chunk that does not decode (a shorter one is tried)."""
    source = iter(blocks)
    buf = bytearray()

    def more() -> bool:
        block = next(source, None)
        if block is None:
            return False
        buf.extend(block)
        return True

    while (start := EVENTS_START.search(buf)) is None:
        if len(buf) > _MAX_HEAD or not more():
            raise NotStreamable
    head = bytes(buf[:start.start()])
    if not head.lstrip(b" \t\r\n").startswith(b"{") or b'"traceEvents"' in head:
        raise NotStreamable
    try:
        msgspec.json.decode(head + b'"traceEvents":[]}', type=_Syntax)
    except (msgspec.DecodeError, RecursionError):
        raise NotStreamable from None
    on_head(head)
    del buf[:start.end()]
    while len(buf) < 2 and more():
        pass
    lead = _BLANK.match(buf)
    at = lead.end() if lead else 0
    if buf[at:at + 1] == b"]":
        return head, _tail(buf[at + 1:], source)
    del buf[:at]
    if buf[:1] != b"{":
        raise NotStreamable
    while True:
        while len(buf) < CHUNK_BYTES and more():
            pass
        after = _decode_chunk(buf, on_events)
        if after is None:
            if len(buf) > _MAX_EVENT or not more():
                raise NotStreamable
            continue
        if buf[after - 1:after] == b"]":
            return head, _tail(buf[after:], source)
        del buf[:after - 1]


def _after_event(buf: bytearray, at: int) -> int | None:
    """Past the next event's `{` or the array's `]` when only whitespace and a comma lie between `at` and it."""
    end = _BLANK.match(buf, at)
    i = end.end() if end else at
    if buf[i:i + 1] == b"]":
        return i + 1
    if buf[i:i + 1] != b",":
        return None
    end = _BLANK.match(buf, i + 1)
    j = end.end() if end else i + 1
    return j + 1 if buf[j:j + 1] == b"{" else None


def _decode_chunk(buf: bytearray, on_events: Callable[[bytearray], None]) -> int | None:
    """Give `on_events` the longest run of whole events at the start of `buf` (a few ends tried, last first);
    where the text after it ends (past the next event's `{` or the array's `]`), None when none decodes."""
    end, tried, looked = len(buf), 0, 0
    while tried < _TRIES and looked < _LOOK:
        brace = buf.rfind(b"}", 0, end)
        looked += 1
        if brace < 0:
            return None
        end = brace
        after = _after_event(buf, brace + 1)
        if after is None:
            continue
        tried += 1
        chunk = bytearray(b"[")
        chunk += memoryview(buf)[:brace + 1]
        chunk += b"]"
        try:
            on_events(chunk)
        except msgspec.DecodeError:
            continue
        return after
    return None


def _tail(rest: bytearray, source: Iterator[bytes]) -> bytes:
    """The text after the events array (bounded)."""
    tail = bytearray(rest)
    for block in source:
        tail += block
        if len(tail) > _MAX_HEAD:
            raise NotStreamable
    if b'"traceEvents"' in tail:
        raise NotStreamable
    return bytes(tail)
