"""Read the stack snapshots `attach` writes (py-spy dumps of every rank) into the `stacks` table.

Promise: `load_stack_inputs(paths)` keeps the files named `stacks/<snapshot>/rank-<r>.json` (as
written by `perftracker.live.stacks`: {"rank", "pid", "host", "ts_ns", "mode", "switches", "threads":
py-spy --json}) and returns the `stacks` table (one row per thread; `frames` is JSON, innermost first,
of [name, short file, line, file], see `perftracker.store.stack_frames`) plus load notes for files it
could not read. `main_stack` reads one py-spy dump into a `MainStack` (the rank's main thread: the
thread whose OS id is the pid), as the live sampler hands it to the diagnosis. What a stack means
(waiting in a collective, hung) is judged in `analyzers/failures/stack_state.py`, not here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.store import LoadNote
from perftracker.store.schema import conform
from perftracker.store.stack_frames import MainStack, StackFrame, encode_frames

STACK_FILE = re.compile(r"rank-(\d+)\.json$")


def frames_of(thread: dict[str, Any]) -> list[StackFrame]:
    """A py-spy thread's frames, innermost first."""
    out = []
    for raw in thread.get("frames") or []:
        if not isinstance(raw, dict):
            continue
        file = str(raw.get("filename") or "")
        short = str(raw.get("short_filename") or file.rsplit("/", 1)[-1])
        line = raw.get("line")
        out.append(StackFrame(str(raw.get("name") or "?"), short, int(line) if isinstance(line, int) else 0, file))
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


def _rows(path: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    rank, pid = int(data["rank"]), int(data.get("pid", -1))
    rows = []
    for t in data.get("threads") or []:
        os_thread = t.get("os_thread_id")
        rows.append({
            "rank": rank, "host": str(data.get("host", "")), "pid": pid, "ts_ns": int(data.get("ts_ns", -1)),
            "thread": str(t.get("thread_name") or ""), "frames": encode_frames(frames_of(t)),
            "snapshot": path.parent.name, "mode": str(data.get("mode", "")), "active": bool(t.get("active")),
            "os_thread": int(os_thread) if isinstance(os_thread, int) else -1,
            "main": t is main_thread(data.get("threads") or [], pid),
            "world_size": int(data.get("world_size", -1)), "file": str(path),
            "switches": int(data["switches"]) if isinstance(data.get("switches"), int) else -1,
        })
    return rows


def load_stack_inputs(paths: Sequence[Path]) -> tuple[pd.DataFrame, list[LoadNote]]:
    """(stacks table, notes) for the stack snapshot files among `paths` (other paths are ignored)."""
    rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    for path in sorted(p for p in paths if is_stack_file(p)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("threads"), list):
                raise TypeError("not a perftracker stack snapshot (no 'threads' list)")
            rows.extend(_rows(path, data))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(LoadNote("warning", str(path), f"stack snapshot skipped ({type(exc).__name__}: {exc})"))
    return conform("stacks", pd.DataFrame(rows)), notes
