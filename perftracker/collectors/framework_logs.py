"""Step times and reported throughput from a training framework's own log, for `perftracker analyze job.log`.

Promise: `looks_like_framework_log(head)` sniffs a file's first bytes; `load_framework_logs(paths)` reads each
framework log once, line by line within `perftracker.bounded`'s limits, through the parsers `attach` uses
(`formats/framework_steps.py`, `formats/framework_throughput.py`), and returns the `steps` and
`reported_throughput` tables with notes. Timing rules: docs/internals/collectors.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import LineBlocks, iter_lines, read_head
from perftracker.collectors.postmortem.flight_recorder import looks_like_fr_pickle
from perftracker.collectors.traces.ranks import rank_from_name
from perftracker.errors import InputError
from perftracker.formats.framework_steps import StepLineParser
from perftracker.formats.framework_throughput import MARKERS as THROUGHPUT_MARKERS
from perftracker.formats.framework_throughput import parse_line
from perftracker.formats.log_lines import line_time_ns
from perftracker.store import LoadNote
from perftracker.store.schema import conform, empty_table

STEP_MARKERS = (b"elapsed time per iteration", b"it/s]", b"s/it]", b"it/s,", b"s/it,", b"global_step=", b"step=",
                b"step:", b"'step':", b"'global_step':")
STEP_SKIPPED = (".json", ".jsonl", ".gz", ".pkl", ".pickle", ".sqlite", ".parquet", ".zip", ".nsys-rep")
THROUGHPUT_SKIPPED = (".gz", ".parquet", ".zip", ".png", ".html", ".pt", ".so", ".npz", ".json", ".jsonl")
MAX_NOTED_FILES = 8


@dataclass
class LogRead:
    """What one read of a log gave: steps rows, step lines that needed a timestamp, throughput rows, bad lines."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    untimed: int = 0
    throughput: list[dict[str, Any]] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)


def looks_like_framework_log(path: Path, head: bytes) -> tuple[bool, bool]:
    """(holds step lines, holds throughput lines): a text file whose head has a marker a known framework prints."""
    start = head.lstrip()
    steps = (not path.name.endswith(STEP_SKIPPED) and not start.startswith(b'{"') and b"\0" not in head
             and any(m in head for m in STEP_MARKERS))
    throughput = (not path.name.endswith(THROUGHPUT_SKIPPED) and start[:1] != b"{" and not looks_like_fr_pickle(head)
                  and any(m in head for m in THROUGHPUT_MARKERS))
    return steps, throughput


def read_log(path: Path, steps: bool, throughput: bool) -> LogRead:
    """One pass over a log's lines, feeding the step parser (pieces split on carriage returns) and/or the
    throughput parser. A step line without a timestamp is laid end to end per rank from 0."""
    named = rank_from_name(path)
    parser = StepLineParser(default_rank=named if named is not None else -1)
    clock: dict[int, int] = {}
    out = LogRead()
    for lineno, line in iter_lines(LineBlocks(path)):
        if throughput and (row := parse_line(line)) is not None:
            if row["tflops"] is None or row["mfu_pct"] is None:
                out.bad.append(lineno)
            else:
                out.throughput.append({**row, "file": str(path), "line": lineno})
        for piece in line.split("\r") if steps else ():
            stamped = line_time_ns(piece) is not None
            record = parser.feed(piece, 0)
            if record is None:
                out.untimed += int(not stamped and "step" in piece)
                continue
            rank, start, end = record["rank"], record["start_ns"], record["end_ns"]
            if not stamped:
                start = clock.get(rank, 0)
                end = start + (record["end_ns"] - record["start_ns"])
                clock[rank] = end
            out.steps.append({"rank": rank, "window": -1, "step": record["step"], "start_ns": start,
                              "dur_ns": end - start, "source": "stepfile"})
    return out


def load_framework_logs(paths: list[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """({"steps", and "reported_throughput" when a log reports it}, notes) of the framework logs among `paths`
    (the others are left to the other input kinds)."""
    steps: list[dict[str, Any]] = []
    throughput: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    read: list[str] = []
    for path in paths:
        has_steps, has_throughput = looks_like_framework_log(path, read_head(path, 256 * 1024))
        if not (has_steps or has_throughput):
            continue
        try:
            found = read_log(path, has_steps, has_throughput)
        except (InputError, OSError) as exc:
            notes.append(LoadNote("warning", str(path), f"could not read the log ({getattr(exc, 'message', exc)})"))
            continue
        throughput.extend(found.throughput)
        if found.bad:
            notes.append(LoadNote("warning", str(path), f"skipped {len(found.bad)} throughput line(s) with a value "
                                  f"out of range (line {found.bad[0]}, ...)"))
        if found.steps:
            steps.extend(found.steps)
            read.append(str(path))
        elif found.untimed:
            notes.append(LoadNote("info", str(path), "its step lines carry no timestamp and no step time of their "
                                  "own (DeepSpeed, torchtitan and logged dicts are timed between two lines): no "
                                  "step times taken; log with timestamps, or give the hook's steps/ files"))
    if read:
        notes.append(LoadNote("info", "framework logs", f"step times of {len(steps)} step(s) read from "
                              f"{len(read)} training log(s) (formats/framework_steps.py, as attach reads them)",
                              {"files": read[:MAX_NOTED_FILES]}))
    tables = {"steps": conform("steps", pd.DataFrame(steps)) if steps else empty_table("steps")}
    if throughput:
        tables["reported_throughput"] = conform("reported_throughput", pd.DataFrame(throughput))
    return tables, notes
