"""Load per-rank step files (`steps/rank-N.jsonl`) into the `steps` and `phases` tables.

Promise: each line is one step (`perftracker.rundir`); bad lines and phases are skipped and counted with their
line numbers; a file cut off mid-line loses only that line. Read within `perftracker.bounded`'s limits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from json.scanner import make_scanner
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import SURROGATE_ESCAPE, LineBlocks, clean_text, iter_lines, loads_json
from perftracker.collectors.file_notes import line_list
from perftracker.errors import InputError
from perftracker.store import LoadNote
from perftracker.store.schema import conform, empty_table
from perftracker.values import MAX_RANK, finite, int_in


def load_step_files(paths: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str], list[LoadNote]]:
    """(steps, phases, host by rank, notes) from step files."""
    steps: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    hosts: dict[int, str] = {}
    notes: list[LoadNote] = []
    for path in paths:
        bad: list[int] = []
        bad_phases = 0
        blocks = LineBlocks(path)
        try:
            for lineno, line in iter_lines(blocks):
                record = parse_step_line(line)
                if record is None:
                    if line.strip():
                        bad.append(lineno)
                    continue
                rank, step, start, end = record["rank"], record["step"], record["start_ns"], record["end_ns"]
                steps.append({"rank": rank, "window": -1, "step": step, "start_ns": start,
                              "dur_ns": end - start, "source": "stepfile"})
                if isinstance(record.get("host"), str):
                    hosts.setdefault(rank, clean_text(record["host"]))
                kept, dropped = step_phases(record)
                bad_phases += dropped
                phases.extend({"rank": rank, "step": step, "phase": name, "dur_ns": dur} for name, dur in kept)
        except (InputError, OSError) as exc:
            notes.append(LoadNote("warning", str(path), f"cannot read step file: {getattr(exc, 'message', exc)}"))
            continue
        if bad:
            notes.append(LoadNote("warning", str(path), f"skipped {len(bad)} malformed step line(s) (line "
                                  f"{line_list(bad)}: not JSON, a "
                                  "field missing, or a rank, step or time out of range)", {"lines": bad[:50]}))
        if bad_phases:
            notes.append(LoadNote("warning", str(path), f"skipped {bad_phases} step phase(s) whose duration is not a "
                                  "number of nanoseconds (negative, NaN, infinite or too large) or whose "
                                  "phases_ns is not an object"))
        notes.extend(LoadNote("warning", str(path), n) for n in blocks.stats.notes(blocks.cap))
    steps_df = conform("steps", pd.DataFrame(steps)) if steps else empty_table("steps")
    phases_df = conform("phases", pd.DataFrame(phases)) if phases else empty_table("phases")
    return steps_df, phases_df, hosts, notes


def step_phases(record: dict[str, Any]) -> tuple[list[tuple[str, int]], int]:
    """(phase, duration ns) of a step record's `phases_ns`, and how many entries were not usable."""
    raw = record.get("phases_ns")
    if raw is None:
        return [], 0
    if not isinstance(raw, dict):
        return [], 1
    kept: list[tuple[str, int]] = []
    for phase, value in raw.items():
        dur = finite(value)
        if dur is None or not 0 <= dur <= MAX_DURATION_NS:
            continue
        kept.append((clean_text(str(phase))[:200], int(dur)))
    return kept, len(raw) - len(kept)


JOB_RANK = -1  # a step record of the job as a whole (step times from one log line that names no rank)
MAX_DURATION_NS = 10**18  # a step or phase longer than ~31 years is not one
MAX_TIME_NS = 4 * 10**18


def parse_step_line(line: str | bytes) -> dict[str, Any] | None:
    """One step record (see perftracker.rundir), or None for a malformed or cut-off line, or one whose rank,
    step or times are out of range (rank 0..MAX_RANK, or -1: the job as a whole, whose step times come from one
    log line without a rank, `steps/rank--1.jsonl`; times 0..4e18 ns, end >= start)."""
    try:
        record = loads_json(line)
    except ValueError:
        return None
    return _checked(record)


def parse_step_lines(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """The step records of these lines, as `parse_step_line` gives them one by one (bad lines left out), in the live
    readers' steady state with one UTF-8 decode of all the lines and the JSON scanner run at each line's start (no
    per-line decode, no encoding detection, no wrapper); a line it does not take whole as one record (leading
    space, a BOM, cut, out of range), or all of them when the text is not UTF-8 or holds a surrogate escape, is
    parsed as before, text then bytes, so the result is the same."""
    batch = list(lines)
    try:
        text = b"\n".join(batch).decode("utf-8")
    except UnicodeDecodeError:
        return [r for r in map(_parse_one, batch) if r is not None]
    parts = text.split("\n")
    if len(parts) != len(batch) or SURROGATE_ESCAPE.search(text):
        return [r for r in map(_parse_one, batch) if r is not None]
    out = []
    start = 0
    for part, raw in zip(parts, batch):
        end = start + len(part)
        try:
            value, stop = _SCAN(text, start)
            record = _checked(value) if stop == end else None
        except (StopIteration, ValueError, RecursionError):
            record = None
        if record is None:
            record = _parse_one(raw)
        if record is not None:
            out.append(record)
        start = end + 1
    return out


def _parse_one(line: bytes) -> dict[str, Any] | None:
    """One line as `parse_step_lines` takes it: as UTF-8 text, else (nothing taken) as bytes."""
    try:
        record = parse_step_line(line.decode("utf-8"))
    except UnicodeDecodeError:
        record = None
    return record if record is not None else parse_step_line(line)


_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # json.loads' own scanner: one JSON value at an index, and where it ends



def _checked(record: Any) -> dict[str, Any] | None:
    """The record when it is a step record in range (see `parse_step_line`), else None."""
    if not isinstance(record, dict):
        return None
    if int_in(record.get("rank"), JOB_RANK, MAX_RANK) is None or int_in(record.get("step"), -1) is None:
        return None
    start, end = int_in(record.get("start_ns"), 0, MAX_TIME_NS), int_in(record.get("end_ns"), 0, MAX_TIME_NS)
    if start is None or end is None or not 0 <= end - start <= MAX_DURATION_NS:
        return None
    return record
