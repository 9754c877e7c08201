"""Read the sampled stack profiles `attach` records with `py-spy record` and say where ranks spend time.

Promise: `load_profile_inputs(paths)` reads `profiles/rank-<r>.txt` (with their optional `.json` sidecars) into
the `profile_samples` table plus notes; lines that do not parse are skipped and counted. `is_baseline_profile`
tells the watcher's baseline window. The format: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import LineBlocks, iter_lines, load_json_file
from perftracker.collectors.file_notes import why_unreadable
from perftracker.errors import InputError
from perftracker.store import LoadNote
from perftracker.store.schema import conform
from perftracker.values import MAX_RANK, ascii_int, finite, int_in, rank_in_range

PROFILE_FILE = re.compile(r"rank-(\d+)\.txt$")
_LINE = re.compile(r"^(?P<stack>.+) (?P<count>\d+)$")
_THREAD = re.compile(r"^thread \((?P<tid>[^)]*)\)(?::\s*(?P<name>.*))?$")


def is_profile_file(path: Path) -> bool:
    return path.parent.name == "profiles" and PROFILE_FILE.search(path.name) is not None


def is_baseline_profile(path: Path) -> bool:
    """A profile of the watcher's healthy baseline window (`baseline/profiles/rank-<r>.txt`), not of the window
    being analyzed: loaded into the `baseline_profile_samples` table."""
    return is_profile_file(path) and path.parent.parent.name == "baseline"


def _sidecar(path: Path) -> dict[str, Any]:
    """The profile's sidecar ({} when it has none or it is not a JSON object)."""
    try:
        data = load_json_file(path.with_suffix(".json"), 1 << 20)
    except (InputError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _meta_number(meta: dict[str, Any], key: str, default: float, hi: float) -> float:
    number = finite(meta.get(key))
    return number if number is not None and 0 <= number <= hi else default


def parse_raw(lines: Iterable[str]) -> tuple[list[tuple[str, str, int]], int]:
    """(thread, stack, count) per parsable line of py-spy's raw output, and how many lines were not."""
    rows: list[tuple[str, str, int]] = []
    bad = 0
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            bad += 1
            continue
        frames = m.group("stack").split(";")
        while frames and frames[0].startswith("process "):  # --subprocesses prefix
            frames.pop(0)
        thread = ""
        if frames:
            t = _THREAD.match(frames[0])
            if t is not None:
                thread = (t.group("name") or t.group("tid")).strip()
                frames.pop(0)
        count = ascii_int(m.group("count"), 0)
        if count is None:
            bad += 1
            continue
        rows.append((thread, ";".join(frames), count))
    return rows, bad


def _load_one(path: Path) -> tuple[pd.DataFrame, list[LoadNote]]:
    rank_match = PROFILE_FILE.search(path.name)
    meta = _sidecar(path)
    blocks = LineBlocks(path)
    try:
        rows, bad = parse_raw(line for _, line in iter_lines(blocks))
    except (OSError, InputError) as exc:
        return pd.DataFrame(), [LoadNote("error", str(path), f"cannot read the stack profile ({why_unreadable(exc)})")]
    notes = [LoadNote("warning", str(path), n) for n in blocks.stats.notes(blocks.cap)]
    if bad:
        notes.append(LoadNote("warning", str(path), f"{bad} line(s) of the stack profile were not py-spy raw "
                                                    "output and were skipped"))
    if not rows:
        return pd.DataFrame(), notes
    frame = pd.DataFrame(rows, columns=["thread", "stack", "count"])
    totals = frame.groupby("thread")["count"].sum()
    main = "MainThread" if "MainThread" in totals.index else str(totals.idxmax())
    frame["main"] = frame["thread"] == main
    name_rank = ascii_int(rank_match.group(1), 0, MAX_RANK) if rank_match is not None else None
    meta_rank = rank_in_range(meta.get("rank"))
    frame["rank"] = meta_rank if meta_rank is not None else (-1 if name_rank is None else name_rank)
    frame["host"] = str(meta.get("host", ""))
    pid = int_in(meta.get("pid"), 0)
    frame["pid"] = -1 if pid is None else pid
    frame["rate_hz"] = _meta_number(meta, "rate_hz", 0.0, 1e6)
    frame["duration_s"] = _meta_number(meta, "duration_s", 0.0, 1e9)
    frame["file"] = str(path)
    return frame, notes


def load_profile_inputs(paths: Sequence[Path]) -> tuple[pd.DataFrame, list[LoadNote]]:
    frames: list[pd.DataFrame] = []
    notes: list[LoadNote] = []
    for path in sorted(paths):
        frame, file_notes = _load_one(path)
        notes.extend(file_notes)
        if not frame.empty:
            frames.append(frame)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return conform("profile_samples", table), notes
