"""The notes every reader of collectors/ leaves about a file, in one wording: it could not be read, the cap or
long lines cut it, lines of it were skipped; `records`, the one reading of JSON-lines records with bad lines;
and `sniffed_table`, the one loop of the readers that take the files whose content is theirs into one table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from perftracker.bounded import Capped, LineStats, file_cap
from perftracker.errors import InputError
from perftracker.rundir import read_jsonl
from perftracker.store import LoadNote
from perftracker.store.schema import conform

T = TypeVar("T")


def why_unreadable(exc: OSError | InputError) -> str:
    """An InputError's message, else the operating system's reason."""
    return exc.message if isinstance(exc, InputError) else str(exc.strerror or exc)


def unreadable(path: Path | str, what: str, exc: OSError | InputError) -> LoadNote:
    """`<what> could not be read: <why>`, a warning naming the file."""
    return LoadNote("warning", str(path), f"{what} could not be read: {why_unreadable(exc)}")


def cut_notes(path: Path | str, cut: LineStats | Capped) -> list[LoadNote]:
    """Warnings for what the per-file cap (and, for lines, MAX_LINE_CHARS) left out of the file."""
    said = cut.notes(file_cap()) if isinstance(cut, LineStats) else [cut.note(file_cap())] if cut.left_out else []
    return [LoadNote("warning", str(path), n) for n in said]


def line_list(lines: list[int]) -> str:
    """The first five line numbers, then "..." when there are more: `3, 8, 9, 12, 40, ...`."""
    return ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")


def records(path: Path, row_of: Callable[[int, dict[str, Any]], T | None]) -> tuple[list[T], list[int], list[LoadNote]]:
    """(`row_of(line, record)` of each JSON object of a JSON-lines file, read bounded; the lines that are not one,
    or that `row_of` refused with None or a ValueError / KeyError / TypeError / AttributeError; the cut notes)."""
    rows: list[T] = []
    bad: list[int] = []
    stats = LineStats()
    for lineno, rec in read_jsonl(path, stats):
        try:
            row = row_of(lineno, rec) if isinstance(rec, dict) else None
        except (AttributeError, ValueError, KeyError, TypeError):
            row = None
        if row is None:
            bad.append(lineno)
        else:
            rows.append(row)
    return rows, bad, cut_notes(path, stats)


def sniffed_table(table: str, what: str, paths: Sequence[Path], sniff: Callable[[Path], bool],
                  parse: Callable[[Path], list[dict[str, Any]]]) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """`{table: the rows parse(path) gives for each path sniff(path) says is one}`, and a note for each file that
    could not be read (`what` names its kind)."""
    rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    for path in map(Path, paths):
        try:
            if sniff(path):
                rows.extend(parse(path))
        except (OSError, InputError) as exc:
            notes.append(unreadable(path, what, exc))
    return {table: conform(table, pd.DataFrame(rows))}, notes
