"""Pick up the post-mortem inputs of a folder: flight-recorder dumps, job logs, error files, kernel logs.

Promise: `is_postmortem_file(path)` tells an FR dump or a torchelastic error file by its first bytes;
`load_postmortem_inputs(paths)` returns ({"collectives_fr", "failures"}, notes, RunInfo). Files are recognized
by content; anything unreadable is a note. Error files named in torchrun's ChildFailedError table take its rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import read_head
from perftracker.collectors.postmortem.flight_recorder import (
    is_fr_dump,
    load_fr_dumps,
    looks_like_fr_json,
    looks_like_fr_pickle,
)
from perftracker.collectors.postmortem.joblogs import (
    load_error_file,
    looks_like_error_file,
    looks_like_job_log,
    parse_job_log,
)
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform, empty_table

_BINARY_SUFFIXES = (".gz", ".parquet", ".zip", ".png", ".html", ".pt", ".so", ".npz")


def is_postmortem_file(path: Path) -> bool:
    """A flight-recorder dump or a torchelastic error file (never a profiler trace)."""
    if path.name.endswith(_BINARY_SUFFIXES):
        return False
    head = read_head(path, 65536)
    if b'"traceEvents"' in head:
        return False
    return looks_like_fr_json(head) or looks_like_error_file(head) or (
        looks_like_fr_pickle(head) and not path.name.endswith(".json"))


def classify(paths: Sequence[Path]) -> tuple[list[Path], list[Path], list[Path]]:
    """(flight-recorder dumps, error files, job/kernel logs) among `paths`."""
    fr: list[Path] = []
    errors: list[Path] = []
    logs: list[Path] = []
    for path in paths:
        if path.name.endswith(_BINARY_SUFFIXES):
            continue
        head = read_head(path, 65536)
        if not head:
            continue
        if looks_like_fr_json(head) or (looks_like_fr_pickle(head) and is_fr_dump(path)):
            fr.append(path)
        elif looks_like_error_file(head):
            errors.append(path)
        elif (head.lstrip()[:1] != b"{" and not path.name.endswith((".json", ".jsonl"))
              and looks_like_job_log(path)):
            logs.append(path)
    return fr, errors, logs


def _match_error_file(path: Path, named: dict[str, int]) -> int | None:
    """The rank the ChildFailedError table gave this error file (matched on the path's tail)."""
    parts = path.parts
    for shown, rank in named.items():
        shown_parts = Path(shown).parts
        k = min(len(parts), len(shown_parts), 4)
        if k and parts[-k:] == shown_parts[-k:]:
            return rank
    return None


def load_postmortem_inputs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """(tables {"collectives_fr", "failures"}, notes, RunInfo) for a post-mortem."""
    fr_paths, error_paths, log_paths = classify(paths)
    notes: list[LoadNote] = []
    learned = RunInfo()
    tables: dict[str, pd.DataFrame] = {}
    if fr_paths:
        frame, learned, fr_notes = load_fr_dumps(fr_paths)
        tables["collectives_fr"] = frame
        notes.extend(fr_notes)
    rows: list[dict[str, Any]] = []
    progress: dict[str, dict[str, Any]] = {}
    for path in log_paths:
        try:
            result = parse_job_log(path)
        except (InputError, OSError) as exc:
            notes.append(LoadNote("warning", str(path), f"could not read the log ({getattr(exc, 'message', exc)})"))
            continue
        notes.extend(LoadNote("warning", str(path), n) for n in result.notes)
        rows.extend(result.rows)
        progress.update(result.progress)
    named = {str(r["error_file"]): int(r["rank"]) for r in rows if r.get("error_file") and int(r["rank"]) >= 0}
    for path in error_paths:
        row = load_error_file(path)
        if row is None:
            notes.append(LoadNote("warning", str(path), "looked like a torchelastic error file but is not one"))
            continue
        rank = _match_error_file(path, named)
        if rank is not None:
            row["rank"] = rank
        rows.append(row)
    if rows:
        tables["failures"] = conform("failures", pd.DataFrame(rows))
    elif log_paths or error_paths:
        tables["failures"] = empty_table("failures")
    learned.watchdog_progress = progress
    if fr_paths or log_paths or error_paths:
        notes.append(LoadNote("info", "postmortem", f"post-mortem inputs: {len(fr_paths)} flight-recorder dump(s), "
                              f"{len(log_paths)} job log(s), {len(error_paths)} error file(s)",
                              {"fr": [str(p) for p in fr_paths[:32]], "logs": [str(p) for p in log_paths[:32]],
                               "error_files": [str(p) for p in error_paths[:32]]}))
    return tables, notes, learned

