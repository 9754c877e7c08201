"""Load per-rank step files (`steps/rank-N.jsonl`) into the `steps` and `phases` tables.

Each line is one step (see `perftracker.rundir`). Lines that are not valid JSON or miss fields are
skipped and counted; a file cut off mid-line loses only that line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.store import LoadNote
from perftracker.store.schema import conform, empty_table


def load_step_files(paths: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str], list[LoadNote]]:
    """(steps, phases, host by rank, notes) from step files."""
    steps: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    hosts: dict[int, str] = {}
    notes: list[LoadNote] = []
    for path in paths:
        bad = 0
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            notes.append(LoadNote("warning", str(path), f"cannot read step file: {exc.strerror or exc}"))
            continue
        for line in lines:
            record = parse_step_line(line)
            if record is None:
                bad += line.strip() != ""
                continue
            rank, step, start, end = record["rank"], record["step"], record["start_ns"], record["end_ns"]
            steps.append({"rank": rank, "window": -1, "step": step, "start_ns": start,
                          "dur_ns": end - start, "source": "stepfile"})
            if isinstance(record.get("host"), str):
                hosts.setdefault(rank, record["host"])
            for phase, dur in (record.get("phases_ns") or {}).items():
                if isinstance(dur, (int, float)) and not isinstance(dur, bool):
                    phases.append({"rank": rank, "step": step, "phase": str(phase), "dur_ns": int(dur)})
        if bad:
            notes.append(LoadNote("warning", str(path), f"skipped {bad} malformed step line(s)"))
    steps_df = conform("steps", pd.DataFrame(steps)) if steps else empty_table("steps")
    phases_df = conform("phases", pd.DataFrame(phases)) if phases else empty_table("phases")
    return steps_df, phases_df, hosts, notes


def parse_step_line(line: str | bytes) -> dict[str, Any] | None:
    """One step record (see perftracker.rundir), or None for a malformed or cut-off line."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    for key in ("rank", "step", "start_ns", "end_ns"):
        value = record.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            return None
    if record["end_ns"] < record["start_ns"]:
        return None
    return record
