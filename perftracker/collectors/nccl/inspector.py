"""Read the JSON lines NCCL's Inspector profiler plugin writes into the `nccl_collectives` table.

Promise: `load_inspector_inputs(paths)` reads every Inspector output file among `paths` (`is_inspector_file`)
within `perftracker.bounded`'s limits and returns `({"nccl_collectives": rows}, notes, RunInfo())`. It is total:
bad lines are skipped, counted and said in one note per file; nothing raises for any content.
The format as NCCL writes it, and how a row's rank is chosen: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import read_head
from perftracker.collectors.file_notes import line_list, records
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform, empty_table
from perftracker.values import INT64_MAX, finite, int_in, rank_in_range

INSPECTOR_SUFFIXES = (".log", ".jsonl")
MAX_NAME_CHARS = 256
_COMM_ID = re.compile(r"0x[0-9a-fA-F]{1,16}\Z")
_OP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}\Z")
_TIMING = {"kernel_gpu", "kernel_cpu", "collective_cpu", "unknown"}
_PERF_KEYS = {"coll_perf": "coll", "p2p_perf": "p2p"}
_MAX_US = INT64_MAX // 1000


def is_inspector_file(path: Path) -> bool:
    """True when the first non-blank line of `path` (a *.log / *.jsonl file) is an Inspector record."""
    if not path.name.endswith(INSPECTOR_SUFFIXES):
        return False
    try:
        head = read_head(path, 8192).decode("utf-8", errors="replace")
    except (InputError, OSError):
        return False
    first = next((line for line in head.splitlines() if line.strip()), "")
    if not first.lstrip().startswith('{"header"'):
        return False
    return '"metadata"' in first and ('"coll_perf"' in first or '"p2p_perf"' in first)


def _text(value: object, limit: int = MAX_NAME_CHARS) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def parse_record(data: object) -> dict[str, Any] | None:
    """One Inspector line (parsed JSON) as a row without `rank` and `file`, or None when it is not a
    complete, in-range Inspector record."""
    if not isinstance(data, dict):
        return None
    header, meta = data.get("header"), data.get("metadata")
    kinds = [key for key in _PERF_KEYS if isinstance(data.get(key), dict)]
    if not isinstance(header, dict) or not isinstance(meta, dict) or len(kinds) != 1:
        return None
    kind = _PERF_KEYS[kinds[0]]
    perf: Mapping[str, Any] = data[kinds[0]]
    comm_id = _text(header.get("id"))
    op = _text(perf.get(kind))
    comm_size = int_in(header.get("n_ranks"), 1, 1 << 20)
    comm_rank = int_in(header.get("rank"), 0, 1 << 20)
    seq = int_in(perf.get(f"{kind}_sn"), 0)
    size = int_in(perf.get(f"{kind}_msg_size_bytes"), 0)
    exec_us = int_in(perf.get(f"{kind}_exec_time_us"), 0, _MAX_US)
    dump_us = int_in(meta.get("dump_timestamp_us"), 0, _MAX_US)
    pid = int_in(meta.get("pid"), 0, 1 << 40)
    if (comm_id is None or not _COMM_ID.match(comm_id) or op is None or not _OP_NAME.match(op)
            or comm_size is None or comm_rank is None or comm_rank >= comm_size or seq is None or size is None
            or exec_us is None or dump_us is None or pid is None):
        return None
    algbw, busbw = finite(perf.get(f"{kind}_algobw_gbs")), finite(perf.get(f"{kind}_busbw_gbs"))
    timing = _text(perf.get(f"{kind}_timing_source"), 32) or "unknown"
    peer = int_in(perf.get("p2p_peer"), 0, 1 << 20) if kind == "p2p" else None
    nnodes = int_in(header.get("nnodes"), 1, 1 << 20)
    return {"host": (_text(meta.get("hostname")) or "").split(".")[0], "pid": pid, "comm_id": comm_id,
            "comm_name": _text(header.get("comm_name")) or "unknown", "comm_rank": comm_rank,
            "comm_size": comm_size, "nnodes": -1 if nnodes is None else nnodes, "kind": kind, "op": op,
            "seq": seq, "peer": -1 if peer is None else peer, "bytes": size, "dur_ns": exec_us * 1000,
            "algbw_gbs": float("nan") if algbw is None else algbw,
            "busbw_gbs": float("nan") if busbw is None else busbw,
            "timing": timing if timing in _TIMING else "unknown", "dump_ns": dump_us * 1000,
            "start_ns": _start_ns(perf, kind)}


def _start_ns(perf: Mapping[str, Any], kind: str) -> int:
    """The op's start (epoch ns) from verbose output's `event_trace_ts`, else -1."""
    trace = perf.get("event_trace_ts")
    start = int_in(trace.get(f"{kind}_start_ts"), 1, _MAX_US) if isinstance(trace, dict) else None
    return -1 if start is None else start * 1000


def parse_inspector_file(path: Path) -> tuple[list[dict[str, Any]], list[LoadNote]]:
    """The rows of one Inspector file (with `rank` set, see the module docstring) and its notes."""
    try:
        rows, bad, notes = records(path, lambda _, rec: parse_record(rec))
    except (InputError, OSError) as exc:
        reason = exc.what if isinstance(exc, InputError) else (exc.strerror or str(exc))
        return [], [LoadNote("warning", str(path), f"NCCL Inspector output not read: {reason}; check the file "
                             "is a readable regular file")]
    if bad:
        shown = line_list(bad)
        notes.append(LoadNote("warning", str(path), f"{len(bad)} line(s) are not complete NCCL Inspector records "
                              f"or hold values out of range and were skipped (line {shown}); the other "
                              f"{len(rows)} record(s) were used. A last line cut off while NCCL wrote it is "
                              "normal for a live job", {"lines": bad[:50], "skipped": len(bad)}))
    notes.extend(_assign_ranks(rows, path))
    return rows, notes


def _assign_ranks(rows: list[dict[str, Any]], path: Path) -> list[LoadNote]:
    """Set each row's global `rank`: its process's rank in the largest communicator of that process."""
    notes: list[LoadNote] = []
    by_process: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        by_process.setdefault((row["host"], row["pid"]), []).append(row)
    for (host, pid), mine in by_process.items():
        largest = max(r["comm_size"] for r in mine)
        ranks = sorted({r["comm_rank"] for r in mine if r["comm_size"] == largest})
        rank = rank_in_range(ranks[0]) if ranks else None
        if len(ranks) > 1:
            notes.append(LoadNote("warning", str(path), f"process {pid} on {host or '?'} has rank(s) "
                                  f"{', '.join(map(str, ranks[:8]))} in communicators of size {largest}; its "
                                  f"records are given rank {ranks[0]} (the global rank is not in Inspector "
                                  "output: the largest communicator's rank stands for it)"))
        for row in mine:
            row["rank"] = -1 if rank is None else rank
            row["file"] = str(path)
    return notes


def load_inspector_inputs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """({"nccl_collectives"}, notes, RunInfo()) of the Inspector files among `paths`."""
    rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    for path in paths:
        found, said = parse_inspector_file(path)
        rows.extend(found)
        notes.extend(said)
    notes.extend(_duplicate_notes(rows))
    if not rows:
        return {"nccl_collectives": empty_table("nccl_collectives")}, notes, RunInfo()
    # each (process, communicator, kind, seq) once: a live copy and the job's own file of one process, or a file
    # copied twice, count each op once
    unique = pd.DataFrame(rows).drop_duplicates(["host", "pid", "comm_id", "kind", "seq"])
    return {"nccl_collectives": conform("nccl_collectives", unique)}, notes, RunInfo()


def _duplicate_notes(rows: list[dict[str, Any]]) -> list[LoadNote]:
    files: dict[tuple[str, int], set[str]] = {}
    for row in rows:
        files.setdefault((row["host"], row["pid"]), set()).add(row["file"])
    twice = {key: names for key, names in files.items() if len(names) > 1}
    if not twice:
        return []
    (host, pid), names = next(iter(twice.items()))
    return [LoadNote("info", "nccl_collectives", f"{len(twice)} process(es) have Inspector records in more than one "
                     f"file (e.g. pid {pid} on {host or '?'}: {', '.join(sorted(names)[:3])}); each operation is "
                     "counted once")]
