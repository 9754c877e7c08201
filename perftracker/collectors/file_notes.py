"""The notes every reader of collectors/ leaves about a file, in one wording: it could not be read, the cap or
long lines cut it, lines of it were skipped."""

from __future__ import annotations

from pathlib import Path

from perftracker.bounded import Capped, LineStats, file_cap
from perftracker.errors import InputError
from perftracker.store import LoadNote


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
