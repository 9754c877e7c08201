"""The typed records a Kineto trace decodes into, and how a chunk of them becomes columns.

Promise: `Event` / `RawEvent` / `TraceDoc` are the msgspec structs a trace decodes into (args:
`kineto_columns.EventArgs`);
`add_typed` and `add_digits` add one decoded chunk to a `ColumnBuilder` (times range-checked, in integer
nanoseconds, the dropped counted); `ParsedTrace` is what reading one file gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from perftracker.bounded import clean_text
from perftracker.collectors.traces.kineto_columns import ColumnBuilder, EventArgs, EventColumns
from perftracker.values import int_in

# Times in ns beyond these are not a trace's (year 2115 in epoch ns): bounded so that start + duration,
# and a base time plus either, still fit int64.
MAX_TS_NS = 4 * 10**18
MAX_DUR_NS = 10**18
MAX_BASE_NS = 4 * 10**18
SURROGATE_NOTE = "text with lone UTF-16 surrogates (\\ud800 without its pair) was read as U+FFFD"


# gc=False: see kineto_columns.EventArgs.
class _EventBase(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None


class Event(_EventBase, gc=False):
    ts: float | None = None
    dur: float | None = 0.0
    args: EventArgs | None = None


class RawEvent(_EventBase, gc=False):
    """Same as Event, with ts/dur as raw JSON text so no digit is lost."""

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


@dataclass
class ParsedTrace:
    """One trace file as read: its events as columns (`kineto_columns.EventColumns`), its facts and notes.

    `names` gives the name of every event read (after events without a usable timestamp are dropped);
    `ts_ns` / `dur_ns` the times of the events the events table keeps (complete events outside the skipped
    categories), in integer nanoseconds.
    """

    path: Path
    columns: EventColumns = field(default_factory=EventColumns)
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
    def names(self) -> list[str]:
        return self.columns.names()

    @property
    def n_events(self) -> int:
        """Events read (with a usable timestamp), kept or not."""
        return self.columns.n_read

    @property
    def negative_durations(self) -> int:
        """Events read whose duration is negative (the tables take them as 0)."""
        return self.columns.negative_durations

    @property
    def ts_ns(self) -> list[int]:
        values: list[int] = self.columns.ts_ns.tolist()
        return values

    @property
    def dur_ns(self) -> list[int]:
        values: list[int] = self.columns.dur_ns.tolist()
        return values


def take_header(trace: ParsedTrace, dist: Any, props: Any, base: Any, host: Any) -> None:
    """The trace's own facts, each kept only when it has the shape and range a trace gives it."""
    trace.distributed_info = dict(dist) if isinstance(dist, dict) else {}
    trace.device_properties = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    trace.base_ns = int_in(base, 1, MAX_BASE_NS)
    trace.host_name = clean_text(host) if isinstance(host, str) else None


def floats(values: Sequence[float | None], none: float = math.nan) -> npt.NDArray[np.float64]:
    """A float64 array of `values`, `none` for None."""
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except TypeError:
        return np.fromiter((none if v is None else v for v in values), dtype=np.float64, count=len(values))


def us_to_ns(us: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Float microseconds (finite, within MAX_TS_NS) -> integer nanoseconds: whole values exactly, others
    rounded half to even (as Python's round(us * 1000.0))."""
    whole = us == np.floor(us)
    ns: npt.NDArray[np.int64] = np.where(whole, us.astype(np.int64) * 1000, np.rint(us * 1000.0).astype(np.int64))
    return ns


def to_ns(value: Any, limit: int = MAX_TS_NS) -> int | None:
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
        whole, _, frac = value.strip().partition(".")  # plain "123.456" in int arithmetic: ~5x cheaper than Decimal
        if whole.isascii() and whole.isdigit() and len(whole) < 20 and len(frac) <= 3 and frac.isascii() \
                and (frac.isdigit() or not frac):
            ns = int(whole) * 1000 + int(frac.ljust(3, "0"))
            return ns if ns <= limit else None
        try:
            return to_ns(Decimal(value.strip()[:64]), limit)
        except InvalidOperation:
            return None
    else:
        return None
    return ns if ns is not None and -limit <= ns <= limit else None


def add_typed(trace: ParsedTrace, builder: ColumnBuilder, events: Sequence[Event]) -> None:
    """Add a chunk of typed events (ts/dur as floats) to `builder`."""
    columns: list[list[Any]] = [[e.name for e in events], [e.cat for e in events], [e.ph for e in events],
                                [e.pid for e in events], [e.tid for e in events], [e.dur for e in events],
                                [e.args for e in events]]
    ts_us = floats([e.ts for e in events])
    usable = np.isfinite(ts_us) & (np.abs(ts_us) <= MAX_TS_NS / 1000)
    if not usable.all():  # events without a usable timestamp are dropped
        keep = np.flatnonzero(usable).tolist()
        trace.dropped += len(ts_us) - len(keep)
        columns = [[column[i] for i in keep] for column in columns]
        ts_us = ts_us[usable]
    names, cats, phs, pids, tids, durs, argss = columns
    dur_us = floats(durs, none=0.0)
    bad_dur = ~(np.isfinite(dur_us) & (np.abs(dur_us) <= MAX_DUR_NS / 1000))
    if bad_dur.any():
        trace.bad_durations += int(bad_dur.sum())
        dur_us[bad_dur] = 0.0
    builder.add(names, cats, phs, pids, tids, us_to_ns(ts_us), us_to_ns(dur_us), argss)


def add_digits(trace: ParsedTrace, builder: ColumnBuilder, events: Sequence[RawEvent]) -> None:
    """Add a chunk of events whose ts/dur are raw digits to `builder`, every digit kept (microseconds as text
    to integer nanoseconds through `to_ns`)."""
    rows = []
    for e in events:
        ts = to_ns(bytes(e.ts).decode("ascii", "replace")) if e.ts else None
        if ts is None:
            trace.dropped += 1
            continue
        dur = to_ns(bytes(e.dur).decode("ascii", "replace"), MAX_DUR_NS) if e.dur else 0
        if dur is None:
            trace.bad_durations += 1
        rows.append((e.name, e.cat, e.ph, e.pid, e.tid, ts, dur or 0, e.args))
    add_rows(builder, rows)


def add_rows(builder: ColumnBuilder, rows: list[tuple[Any, ...]]) -> None:
    """Add events given as (name, cat, ph, pid, tid, ts ns, dur ns, args) rows to `builder`."""
    names, cats, phs, pids, tids, ts_ns, dur_ns, argss = (list(column) for column in zip(*rows)) if rows \
        else ([] for _ in range(8))
    builder.add(names, cats, phs, pids, tids, np.array(ts_ns, dtype=np.int64), np.array(dur_ns, dtype=np.int64),
                argss)
