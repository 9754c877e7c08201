"""Per-operation records of a pipeline-parallel job, from the OSDI'25 artifact's Parquet or Chrome-trace files.

Promise: `read_parquet_ops(path)` and `read_timeline_ops(path)` return a `pipeline_ops` frame and notes naming
the file for what could not be used; reads are bounded. `is_ops_parquet` / `is_ops_timeline` /
`is_expected_result` tell the files. Columns: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from perftracker.bounded import file_cap, inflate, loads_json, read_capped, read_head
from perftracker.errors import InputError
from perftracker.store import LoadNote

COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc", "mb_id")
OPTIONAL = ("mc", "gmc", "mb_id")
MAX_ROWS = 20_000_000
MAX_RANK = 1 << 20
_STAGE = re.compile(r"PP rank (\d+)")


def is_ops_parquet(path: Path) -> bool:
    """A Parquet file outside a saved analysis' `tables/` (the artifact's records are claimed whether or not
    their schema reads: a cut one gets a note naming it rather than passing silently)."""
    return path.suffix.lower() == ".parquet" and path.parent.name != "tables"


def is_ops_timeline(path: Path) -> bool:
    """A Chrome trace of per-operation records: its first bytes hold a compute op with a step argument."""
    head = read_head(path, 1 << 16)
    head = bytes(inflate(head, cap=8192).data) if path.name.endswith(".gz") else head
    return (b'"forward-compute"' in head or b'"backward-compute"' in head) and b'"step"' in head


def is_expected_result(path: Path) -> bool:
    """The artifact's expected what-if outputs (result-*.json, ms-*.json, mw-*.json): not records."""
    if not path.name.endswith(".json"):
        return False
    head = read_head(path, 2048)
    return (b'"job_meta"' in head and b'"trial_name"' in head) or (b'"trem"' in head and b'"tideal"' in head)


def read_parquet_ops(path: Path) -> tuple[pd.DataFrame, list[LoadNote]]:
    """The records of a Parquet file, or an empty frame with a note."""

    try:
        size = path.stat().st_size
        if size > file_cap():
            return _empty(), [_note(path, f"is {size:,} bytes, over the per-file cap {file_cap():,}: not read")]
        handle = pq.ParquetFile(path)
        names = set(handle.schema_arrow.names)
        missing = [c for c in COLUMNS if c not in names and c not in OPTIONAL]
        if missing:
            return _empty(), [_note(path, f"is a Parquet file without the per-operation columns "
                                          f"{', '.join(missing)}: not read as a pipeline job's records", "info")]
        if handle.metadata.num_rows > MAX_ROWS:
            return _empty(), [_note(path, f"holds {handle.metadata.num_rows:,} rows, over {MAX_ROWS:,}: not read")]
        table = handle.read(columns=[c for c in COLUMNS if c in names])
    except (OSError, ValueError, InputError) as exc:
        return _empty(), [_note(path, f"cannot be read as Parquet (cut or corrupt?): {exc}")]
    frame = table.to_pandas()
    start = pd.to_numeric(frame["start_ts"], errors="coerce").to_numpy(np.float64) * 1e9
    dur = pd.to_numeric(frame["duration"], errors="coerce").to_numpy(np.float64) * 1e9
    ops = pd.DataFrame({c: pd.to_numeric(frame[c], errors="coerce") if c in frame else -1
                        for c in ("rank", "dp_rank", "stage", "step", "seq_id", "mc", "gmc", "mb_id")})
    ops["optype"] = frame["optype"].astype(str).to_numpy()
    ops["start_ns"], ops["dur_ns"] = start, dur
    return _valid(path, ops)


def read_timeline_ops(path: Path) -> tuple[pd.DataFrame, list[LoadNote]]:
    """The records of the artifact's Chrome-trace timeline, or an empty frame with a note."""
    try:
        capped = read_capped(path)
        raw = capped.data
        if path.name.endswith(".gz"):
            inflated = inflate(raw)
            if inflated.error or not inflated.complete:
                return _empty(), [_note(path, "is a cut or corrupt gzip stream: not read")]
            raw = inflated.data
        doc: Any = loads_json(raw)
    except (OSError, ValueError, InputError) as exc:
        return _empty(), [_note(path, f"cannot be read as a Chrome trace (cut or corrupt?): {exc}")]
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return _empty(), [_note(path, "holds no list of trace events")]
    stage_of: dict[tuple[Any, Any], int] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name":
            found = _STAGE.search(str((e.get("args") or {}).get("name", "")))
            if found:
                stage_of[(e.get("pid"), e.get("tid"))] = int(found.group(1))
    rows = []
    for e in events[:MAX_ROWS]:
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("args"), dict):
            continue
        args = e["args"]
        rows.append((e.get("pid"), stage_of.get((e.get("pid"), e.get("tid")), -1), args.get("step"),
                     str(e.get("name", "")), e.get("ts"), e.get("dur"), args.get("seq_id"),
                     args.get("model_chunk"), args.get("mb_id")))
    frame = pd.DataFrame(rows, columns=["dp_rank", "stage", "step", "optype", "ts", "dur", "seq_id", "mc", "mb_id"])
    ops = pd.DataFrame({c: pd.to_numeric(frame[c], errors="coerce")
                        for c in ("dp_rank", "stage", "step", "seq_id", "mc", "mb_id")})
    ops["gmc"] = ops["mc"]
    ops["rank"] = -1  # the timeline names no global rank: set from the layout by the loader
    ops["optype"] = frame["optype"].to_numpy()
    ops["start_ns"] = pd.to_numeric(frame["ts"], errors="coerce").to_numpy(np.float64) * 1e3
    ops["dur_ns"] = pd.to_numeric(frame["dur"], errors="coerce").to_numpy(np.float64) * 1e3
    return _valid(path, ops)


def _valid(path: Path, ops: pd.DataFrame) -> tuple[pd.DataFrame, list[LoadNote]]:
    """Rows with finite times, non-negative durations and worker coordinates in range; a note for the rest."""
    ok = np.isfinite(ops["start_ns"].to_numpy(np.float64)) & np.isfinite(ops["dur_ns"].to_numpy(np.float64))
    ok &= ops["dur_ns"].to_numpy(np.float64) >= 0
    for col in ("dp_rank", "stage", "step", "seq_id"):
        values = ops[col].to_numpy(np.float64)
        ok &= np.isfinite(values) & (values >= 0) & (values < (2**62 if col == "step" else MAX_RANK))
    notes = []
    if not ok.all():
        notes.append(_note(path, f"{int((~ok).sum()):,} of {len(ops):,} records have impossible values (a "
                                 "negative or missing time, duration, worker or step): left out", level="info"))
    kept = ops[ok].copy()
    for col in ("rank", "mc", "gmc", "mb_id"):
        kept[col] = pd.to_numeric(kept[col], errors="coerce").fillna(-1)
    kept["start_ns"] = kept["start_ns"].round()
    kept["dur_ns"] = kept["dur_ns"].round()
    if kept.empty and not notes:
        notes.append(_note(path, "holds no per-operation record"))
    return kept, notes


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=["rank", "dp_rank", "stage", "step", "optype", "start_ns", "dur_ns", "seq_id", "mc",
                                 "gmc", "mb_id"])


def _note(path: Path, what: str, level: str = "warning") -> LoadNote:
    return LoadNote(level, str(path), f"{path.name} {what}")
