"""The parts every training log line may carry: which rank wrote it, when, and terminal colour codes.

Promise: one rank-prefix grammar for every reader of job and framework logs: `launcher_prefix` (torchrun,
OpenMPI), `line_rank` (that, else a rank tag, else -1), `line_time_ns` (a local-time timestamp) and `strip_ansi`.
Linear regexes only. The grammar: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
import time

from perftracker.values import MAX_RANK, ascii_int

_LAUNCHER = re.compile(r"^\s*(?:\[[A-Za-z_]{0,32}(\d{1,7})\]:|\[\d{1,7},(\d{1,7})\]<std(?:out|err)>:)")
_TAG = re.compile(r"\[Rank (\d{1,7})\]|\[rank(\d{1,7})\]:|\brank-(\d{1,7})/")
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")
NO_RANK = -1


def _rank(match: re.Match[str]) -> int | None:
    return ascii_int(next(g for g in match.groups() if g is not None), 0, MAX_RANK)


def launcher_prefix(line: str) -> tuple[int, int] | None:
    """(rank, where the rest of the line starts) of a launcher prefix at the line's start, else None."""
    match = _LAUNCHER.match(line)
    if match is None:
        return None
    rank = _rank(match)
    return None if rank is None else (rank, match.end())


def line_rank(line: str) -> int:
    """The rank the line's launcher prefix names, else its rank tag, else NO_RANK (-1)."""
    prefix = launcher_prefix(line)
    if prefix is not None:
        return prefix[0]
    tag = _TAG.search(line)
    rank = _rank(tag) if tag is not None else None
    return NO_RANK if rank is None else rank


def line_time_ns(line: str) -> int | None:
    """Wall time (ns) of a `YYYY-MM-DD hh:mm:ss[.,fraction]` timestamp in the line (local time)."""
    match = _TIMESTAMP.search(line)
    if not match:
        return None
    day, hh, mm, ss, frac = match.groups()
    try:
        secs = time.mktime(time.strptime(f"{day} {hh}:{mm}:{ss}", "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    frac_ns = int((frac or "0").ljust(9, "0")[:9])
    return int(secs) * 1_000_000_000 + frac_ns


def strip_ansi(line: str) -> str:
    """The line without terminal colour codes."""
    return _ANSI.sub("", line) if "\x1b" in line else line
