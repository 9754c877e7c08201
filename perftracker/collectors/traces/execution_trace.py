"""Read PyTorch / Chakra execution traces (ET) found beside Kineto traces: their operators and input shapes.

Promise: `is_execution_trace(path)` tells an ET file; `load_execution_trace_inputs(paths)` picks the ETs among
`paths` and returns ({"exec_ops": table}, notes, RunInfo()): one row per operator node (bookkeeping nodes left
out), a note per file it could not use. Joining them to the Kineto ops is `analyzers/traces/exec_trace.py`'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import loads_json, read_head
from perftracker.collectors.traces.kineto_read import read_bytes
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform, empty_table

_ET_SUFFIXES = ("_et.json", "_et.json.gz")
_BOOKKEEPING = "[pytorch|profiler|execution_trace|"


def is_execution_trace(path: Path) -> bool:
    """An execution trace, by name (`*_et.json[.gz]`) or, for other .json files, by its first bytes."""
    if path.name.endswith(_ET_SUFFIXES):
        return True
    head = read_head(path, 4096) if path.name.endswith(".json") else b""
    return b'"nodes"' in head and b'"schema"' in head and b'"traceEvents"' not in head


def load_execution_trace_inputs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """The ETs among `paths` (the files a folder holds besides its traces), as loader output."""
    found = [p for p in paths if is_execution_trace(p)]
    if not found:
        return {}, [], RunInfo()
    frames: list[pd.DataFrame] = []
    notes: list[LoadNote] = []
    for path in found:  # every readable ET's rows, a note for each other
        try:
            frames.append(_read(path))
        except InputError as exc:
            notes.append(LoadNote("error", str(path), exc.message))
    table = conform("exec_ops", pd.concat(frames, ignore_index=True)) if frames else empty_table("exec_ops")
    return {"exec_ops": table}, notes, RunInfo()


def _read(path: Path) -> pd.DataFrame:
    text = read_bytes(path)  # regular files only, under the cap, gzip inflated in chunks
    try:
        doc = loads_json(bytes(text.data))
    except ValueError as exc:
        raise InputError(f"the execution trace is not valid JSON ({exc})", str(path),
                         "re-export it with torch.profiler.ExecutionTraceObserver") from None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise InputError("this JSON is not an execution trace (no nodes list)", str(path),
                         "pass the file written by torch.profiler.ExecutionTraceObserver") from None
    pid = doc.get("pid")
    rows: list[dict[str, Any]] = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        name = str(node.get("name", ""))
        rf_id = node.get("rf_id")
        if name.startswith(_BOOKKEEPING) or not isinstance(rf_id, int) or isinstance(rf_id, bool):
            continue
        node_id = node.get("id")
        rows.append({"file": str(path), "pid": pid if isinstance(pid, int) else -1,
                     "node_id": node_id if isinstance(node_id, int) else -1, "rf_id": rf_id, "name": name,
                     "input_shapes": json.dumps(node.get("input_shapes", []), separators=(",", ":")),
                     "input_types": json.dumps(node.get("input_types", []), separators=(",", ":"))})
    return pd.DataFrame(rows) if rows else empty_table("exec_ops").assign(file=[])
