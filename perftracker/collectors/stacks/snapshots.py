"""Read the stack snapshots `attach` writes (py-spy dumps of every rank) into the `stacks` table.

Promise: `load_stack_inputs(paths)` reads `stacks/<snapshot>/rank-<r>.json` into the `stacks` table (one row per
thread) plus notes; `main_stack` reads one dump into a `MainStack`. What a stack means is judged in
`analyzers/failures/stack_state.py`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import load_json_file
from perftracker.errors import InputError
from perftracker.store import LoadNote
from perftracker.store.schema import conform
from perftracker.store.stack_frames import MainStack, StackFrame, encode_frames
from perftracker.values import INT64_MAX, INT64_MIN, MAX_RANK, int_in, rank_in_range

MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024  # a py-spy dump of every thread is kilobytes to megabytes

STACK_FILE = re.compile(r"rank-(\d+)\.json$")


def frames_of(thread: dict[str, Any]) -> list[StackFrame]:
    """A py-spy thread's frames, innermost first (frames that are not objects skipped, odd lines as 0)."""
    out = []
    frames = thread.get("frames")
    for raw in frames if isinstance(frames, list) else []:
        if not isinstance(raw, dict):
            continue
        file = str(raw.get("filename") or "")
        short = str(raw.get("short_filename") or file.rsplit("/", 1)[-1])
        line = int_in(raw.get("line"), -(2**31), 2**31 - 1)
        out.append(StackFrame(str(raw.get("name") or "?"), short, 0 if line is None else line, file))
    return out


def main_thread(threads: Sequence[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    """The thread running the training loop: the process's first thread (os thread id == pid)."""
    for key in ("os_thread_id", "thread_id"):
        for t in threads:
            if t.get(key) == pid:
                return t
    for t in threads:
        if t.get("thread_name") == "MainThread":
            return t
    return threads[0] if threads else None


def main_stack(rank: int, host: str, pid: int, threads: Sequence[dict[str, Any]],
               switches: int | None) -> MainStack | None:
    """One rank's main thread from a py-spy --json dump (None when the dump has no thread)."""
    thread = main_thread(threads, pid)
    if thread is None:
        return None
    return MainStack(rank=rank, host=host, pid=pid, idle=not bool(thread.get("active")),
                     frames=tuple(frames_of(thread)), switches=switches)


def is_stack_file(path: Path) -> bool:
    return path.parent.parent.name == "stacks" and STACK_FILE.search(path.name) is not None


def _int_or(value: Any, default: int = -1, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    number = int_in(value, lo, hi)
    return default if number is None else number


def _rows(path: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    rank = rank_in_range(data.get("rank"))
    if rank is None:
        raise ValueError(f"'rank' is {str(data.get('rank'))[:40]!r}, not a rank from 0 to {MAX_RANK}")
    pid = _int_or(data.get("pid"), lo=0)
    threads = [t for t in data["threads"] if isinstance(t, dict)]
    main = main_thread(threads, pid)
    rows = []
    for t in threads:
        rows.append({
            "rank": rank, "host": str(data.get("host", "")), "pid": pid, "ts_ns": _int_or(data.get("ts_ns"), lo=0),
            "thread": str(t.get("thread_name") or ""), "frames": encode_frames(frames_of(t)),
            "snapshot": path.parent.name, "mode": str(data.get("mode", "")), "active": bool(t.get("active")),
            "os_thread": _int_or(t.get("os_thread_id")), "main": t is main,
            "world_size": _int_or(data.get("world_size"), lo=1, hi=MAX_RANK + 1), "file": str(path),
            "switches": _int_or(data.get("switches"), lo=0),
        })
    return rows


def load_stack_inputs(paths: Sequence[Path]) -> tuple[pd.DataFrame, list[LoadNote]]:
    """(stacks table, notes) for the stack snapshot files among `paths` (other paths are ignored)."""
    rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    for path in sorted(p for p in paths if is_stack_file(p)):
        try:
            data = load_json_file(path, MAX_SNAPSHOT_BYTES)
            if not isinstance(data, dict) or not isinstance(data.get("threads"), list):
                raise ValueError("not a perftracker stack snapshot (no 'threads' list)")
            rows.extend(_rows(path, data))
        except (InputError, OSError, ValueError) as exc:
            notes.append(LoadNote("warning", str(path), f"stack snapshot skipped ({getattr(exc, 'message', exc)})"))
    return conform("stacks", pd.DataFrame(rows)), notes
