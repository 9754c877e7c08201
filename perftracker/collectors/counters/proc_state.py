"""Each rank's main thread's scheduler state, sampled through a window: stopped, running, asleep.

Promise: `read_state(pid, proc_root)` gives the state letter of `/proc/<pid>/stat` or None; `state_record(...)`
builds one record; `load_states_jsonl(path)` reads a file of them, bounded, into `proc_states` rows, skipping
lines that are not records with a note. Record format: docs/internals/collectors.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perftracker.collectors.counters.sched import load_window_records, nonneg_int
from perftracker.store import LoadNote

RECORD_KEYS = frozenset({"ts_ns", "rank", "pid", "state"})
STATES = frozenset("RSDTtZXIWPK")


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
    return RECORD_KEYS <= first.keys() and "run_ns" not in first


def _state_row(rec: dict[str, Any], window: str, host: str) -> dict[str, Any] | None:
    ts, pid, rank, state = nonneg_int(rec.get("ts_ns")), nonneg_int(rec.get("pid")), rec.get("rank"), rec.get("state")
    if (ts is None or pid is None or not isinstance(rank, int) or isinstance(rank, bool)
            or not isinstance(state, str) or state not in STATES):
        return None
    return {"host": str(rec.get("host") or host), "rank": rank, "pid": pid, "ts_ns": ts, "state": state,
            "window": window}


def load_states_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    return load_window_records(path, "process-state records", _state_row)
