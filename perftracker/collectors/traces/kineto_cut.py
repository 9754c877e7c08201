"""Keep every complete event of a Kineto trace cut off (or damaged) anywhere, and say how much was lost.

Promise: `cut_back(data, error_at)` shortens the refused JSON text in place to its last complete event and
closes it, so it decodes with every event before the cut; `CutReport` says what was kept and lost.
How the cut is found: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

_WINDOW = 4 * 1024 * 1024  # where a cut after the events array is looked for
_TRIES = 16  # closings tried
_BRACES = 100_000  # `}` looked at, however far back (a run of whitespace or junk may separate them)
EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
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


@dataclass(frozen=True)
class CutReport:
    """What was kept of a trace that stops being readable before its end."""

    events_kept: int
    bytes_used: int  # bytes of the JSON text up to the last kept event
    bytes_read: int  # bytes of JSON text there were (after gzip)
    total_known: bool  # False: the text read is not the whole trace (gzip stream cut short, cap reached)
    damaged_at: int  # the byte the decoder stopped at
    gzip: bool

    @property
    def share_lost(self) -> float | None:
        """The share of the trace's text not used, when the whole text is known."""
        if not self.total_known or self.bytes_read <= 0:
            return None
        return (self.bytes_read - self.bytes_used) / self.bytes_read

    def message(self) -> str:
        how = ("cut off mid-write" if self.damaged_at >= self.bytes_read - 1
               else f"unreadable from byte {self.damaged_at:,} on (damaged)")
        text = (f"the trace is {how}; kept the {self.events_kept:,} complete events before that point, using "
                f"{self.bytes_used:,} of the {self.bytes_read:,} bytes of JSON {'decoded' if self.gzip else 'read'}")
        share = self.share_lost
        if share is not None:
            return text + f" ({100.0 * share:.1f}% of the file lost)"
        return text + " (how much of the trace is missing is unknown: " + (
            "the gzip stream has no end)" if self.gzip else "the file was read only up to the cap)")

    def data(self) -> dict[str, Any]:
        return {"kind": "cut_trace", "events_kept": self.events_kept, "bytes_used": self.bytes_used,
                "bytes_read": self.bytes_read, "total_known": self.total_known, "share_lost": self.share_lost,
                "damaged_at": self.damaged_at, "gzip": self.gzip}
