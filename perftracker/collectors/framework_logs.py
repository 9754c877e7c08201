"""Step times from a training framework's own log, for `perftracker analyze job.log`: the parser `attach` uses.

Promise: `looks_like_framework_log(path)` sniffs a text file's head for the lines `formats/framework_steps.py`
reads (Megatron-LM, DeepSpeed, Hugging Face Trainer, Lightning, torchtitan); `load_framework_logs(paths)` reads
each such file line by line within `perftracker.bounded`'s limits (progress bars split on carriage returns)
through that one parser, and returns the `steps` rows (`source` "stepfile", as the step records `attach` writes
from the same lines) with notes. A line's own timestamp places its step; a format that states its step time
(Megatron's per-iteration time, a progress bar's rate) without a timestamp is laid end to end per rank; a format
whose step time is the time between two lines (DeepSpeed, torchtitan, logged dicts) needs timestamps, and a
file without them is said in a note. The rank is the line's (`formats/log_lines.py`), else the file name's,
else -1 (the job as a whole).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import LineBlocks, iter_lines, read_head
from perftracker.collectors.traces.ranks import rank_from_name
from perftracker.errors import InputError
from perftracker.formats.framework_steps import StepLineParser
from perftracker.formats.log_lines import line_time_ns
from perftracker.store import LoadNote
from perftracker.store.schema import conform, empty_table

MARKERS = (b"elapsed time per iteration", b"it/s]", b"s/it]", b"it/s,", b"s/it,", b"global_step=", b"step=",
           b"step:", b"'step':", b"'global_step':")
SKIPPED_SUFFIXES = (".json", ".jsonl", ".gz", ".pkl", ".pickle", ".sqlite", ".parquet", ".zip", ".nsys-rep")
MAX_NOTED_FILES = 8


def looks_like_framework_log(path: Path) -> bool:
    """A text file (not JSON lines) whose head holds a step line one of the known frameworks prints."""
    if path.name.endswith(SKIPPED_SUFFIXES):
        return False
    try:
        head = read_head(path, 256 * 1024)
    except OSError:
        return False
    json_lines = head.lstrip().startswith(b'{"')  # JSON; the Trainer's logged dicts are Python's, {'loss': ...}
    return not json_lines and b"\0" not in head and any(m in head for m in MARKERS)


def _file_steps(path: Path) -> tuple[list[dict[str, Any]], int]:
    """(steps rows, lines whose step time needed a timestamp they lack) of one log."""
    named = rank_from_name(path)
    parser = StepLineParser(default_rank=named if named is not None else -1)
    clock: dict[int, int] = {}  # per rank: where the next untimed step starts (laid end to end from 0)
    rows: list[dict[str, Any]] = []
    untimed = 0
    for _, line in iter_lines(LineBlocks(path)):
        for piece in line.split("\r"):
            stamped = line_time_ns(piece) is not None
            record = parser.feed(piece, 0)
            if record is None:
                untimed += int(not stamped and "step" in piece)
                continue
            rank, start, end = record["rank"], record["start_ns"], record["end_ns"]
            if not stamped:
                start = clock.get(rank, 0)
                end = start + (record["end_ns"] - record["start_ns"])
                clock[rank] = end
            rows.append({"rank": rank, "window": -1, "step": record["step"], "start_ns": start,
                         "dur_ns": end - start, "source": "stepfile"})
    return rows, untimed if not rows else 0


def load_framework_logs(paths: list[Path]) -> tuple[pd.DataFrame, list[LoadNote]]:
    """(steps, notes) of the framework logs among `paths` (the others are left to the other input kinds)."""
    rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    read: list[str] = []
    for path in paths:
        if not looks_like_framework_log(path):
            continue
        try:
            found, untimed = _file_steps(path)
        except (InputError, OSError) as exc:
            notes.append(LoadNote("warning", str(path), f"could not read the log ({getattr(exc, 'message', exc)})"))
            continue
        if found:
            rows.extend(found)
            read.append(str(path))
        elif untimed:
            notes.append(LoadNote("info", str(path), "its step lines carry no timestamp and no step time of their "
                                  "own (DeepSpeed, torchtitan and logged dicts are timed between two lines): no "
                                  "step times taken; log with timestamps, or give the hook's steps/ files"))
    if read:
        notes.append(LoadNote("info", "framework logs", f"step times of {len(rows)} step(s) read from "
                              f"{len(read)} training log(s) (formats/framework_steps.py, as attach reads them)",
                              {"files": read[:MAX_NOTED_FILES]}))
    frame = conform("steps", pd.DataFrame(rows)) if rows else empty_table("steps")
    return frame, notes
