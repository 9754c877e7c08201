"""What the scheduler gave each rank's process around a window: its CPU accounting, and its main thread's state
(stopped, running, asleep) sampled through it.

Promise: `read_process` / `read_state` read /proc (None when they cannot), `snapshot_record` / `state_record` build
one record; `load_sched_jsonl` / `load_states_jsonl` read files of them, bounded, into `cpu_sched` / `proc_states`
rows, skipping lines that are not records with a note. Record formats: docs/internals/collectors.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perftracker.collectors.file_notes import line_list, records
from perftracker.store import LoadNote

RECORD_KEYS = frozenset({"ts_ns", "rank", "pid", "run_ns", "wait_ns"})
STATE_KEYS = frozenset({"ts_ns", "rank", "pid", "state"})
STATES = frozenset("RSDTtZXIWPK")


def read_process(pid: int, proc_root: Path = Path("/proc")) -> tuple[int, int, int, int] | None:
    """(run_ns, wait_ns, slices, threads) summed over the threads of `pid`, or None."""
    run = wait = slices = threads = 0
    try:
        tids = os.listdir(proc_root / str(pid) / "task")
    except OSError:
        return None
    for tid in tids:
        try:
            fields = (proc_root / str(pid) / "task" / tid / "schedstat").read_text().split()
        except OSError:
            continue  # a thread that ended between the listing and the read
        if len(fields) < 3:
            continue
        run, wait, slices, threads = run + int(fields[0]), wait + int(fields[1]), slices + int(fields[2]), threads + 1
    return (run, wait, slices, threads) if threads else None


def load1(proc_root: Path = Path("/proc")) -> float | None:
    try:
        return float((proc_root / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpus_of(pid: int) -> int | None:
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return None


def snapshot_record(host: str, rank: int, pid: int, ts_ns: int, proc_root: Path = Path("/proc")) -> dict[str, Any] | None:
    read = read_process(pid, proc_root)
    if read is None:
        return None
    run, wait, slices, threads = read
    return {"ts_ns": ts_ns, "host": host, "rank": rank, "pid": pid, "run_ns": run, "wait_ns": wait,
            "slices": slices, "threads": threads, "load1": load1(proc_root), "cpus": cpus_of(pid)}


def looks_like_sched_jsonl(first: dict[str, Any]) -> bool:
    return RECORD_KEYS <= first.keys() and "metrics" not in first


def nonneg_int(value: Any) -> int | None:
    """`value` when it is a non-negative int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def load_window_records(path: Path, what: str, row_of: Callable[[dict[str, Any], str, str], dict[str, Any] | None]
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(rows, no device rows, notes) of a JSON-lines file of records taken around a window (bounded):
    `row_of(record, window, host)` turns one record into a row or None (not such a record: skipped, with one note
    naming `what` and the lines); the window is "baseline" under a `baseline/` folder, else "incident"; host defaults
    to the file name's head."""
    window = "baseline" if path.parent.parent.name == "baseline" else "incident"
    host = path.name.split(".")[0]
    rows, bad, notes = records(path, lambda _, rec: row_of(rec, window, host))
    if bad:
        notes.append(LoadNote("warning", str(path), f"{len(bad)} line(s) are not {what} and were skipped "
                              f"(line {line_list(bad)})", {"lines": bad[:50]}))
    return rows, [], notes


def _sched_row(rec: dict[str, Any], window: str, host: str) -> dict[str, Any] | None:
    ts, pid, run, wait = (nonneg_int(rec.get(k)) for k in ("ts_ns", "pid", "run_ns", "wait_ns"))
    rank = rec.get("rank")
    if ts is None or pid is None or run is None or wait is None or not isinstance(rank, int) or isinstance(rank, bool):
        return None
    load = rec.get("load1")
    cpus = nonneg_int(rec.get("cpus"))
    return {"host": str(rec.get("host") or host), "rank": rank, "pid": pid, "ts_ns": ts, "run_ns": run,
            "wait_ns": wait, "slices": nonneg_int(rec.get("slices")) or 0,
            "load1": float(load) if isinstance(load, (int, float)) and not isinstance(load, bool) else float("nan"),
            "cpus": cpus if cpus is not None else -1, "window": window}


def load_sched_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    return load_window_records(path, "scheduler records", _sched_row)


def stat_fields(path: str | Path) -> list[bytes] | None:
    """The fields of a /proc `stat` file after the command name (field 3, the state, first), or None."""
    try:
        with open(path, "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses


def read_state(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The state letter of `pid`'s main thread, or None."""
    fields = stat_fields(proc_root / str(pid) / "stat")
    state = fields[0].decode("ascii", "replace") if fields else None
    return state if state in STATES else None


def state_record(host: str, rank: int, pid: int, ts_ns: int, proc_root: Path = Path("/proc")) -> dict[str, Any] | None:
    state = read_state(pid, proc_root)
    if state is None:
        return None
    return {"ts_ns": ts_ns, "host": host, "rank": rank, "pid": pid, "state": state}


def looks_like_states_jsonl(first: dict[str, Any]) -> bool:
    return STATE_KEYS <= first.keys() and "run_ns" not in first


def _state_row(rec: dict[str, Any], window: str, host: str) -> dict[str, Any] | None:
    ts, pid, rank, state = nonneg_int(rec.get("ts_ns")), nonneg_int(rec.get("pid")), rec.get("rank"), rec.get("state")
    if (ts is None or pid is None or not isinstance(rank, int) or isinstance(rank, bool)
            or not isinstance(state, str) or state not in STATES):
        return None
    return {"host": str(rec.get("host") or host), "rank": rank, "pid": pid, "ts_ns": ts, "state": state,
            "window": window}


def load_states_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    return load_window_records(path, "process-state records", _state_row)
