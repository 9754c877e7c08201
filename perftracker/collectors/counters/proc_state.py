"""Each rank's main thread's scheduler state, sampled through a window: stopped, running, asleep.

Record format (`<evidence>/sched/<host>.states.jsonl`, and `baseline/sched/` for the watcher's healthy window;
one JSON object per rank per sample, a sample every 50-100 ms, jittered, during the window's stack recording)::

    {"ts_ns": ..., "host": "node-a", "rank": 3, "pid": 4242, "state": "S"}

`state` is the third field of `/proc/<pid>/stat` (the main thread, tid = pid): R running or runnable, S asleep
(a voluntary wait: a lock, a condition variable, a socket: where a rank waits in a gloo or NCCL collective),
D uninterruptible (disk or other I/O), T stopped by a signal (SIGSTOP), t stopped by a tracer. One read of a
few hundred bytes per rank per sample; the jitter keeps the samples from locking onto a periodic disturbance
(a 100 ms SIGSTOP duty cycle sampled every 100 ms would always see the same phase).

Promise: `read_state(pid, proc_root)` gives the state letter or None (gone, no permission);
`state_record(...)` builds one record; `load_states_jsonl(path)` reads a file of them, bounded, into rows of
the `proc_states` table (the window is "baseline" under a `baseline/` folder, else "incident"), skipping
lines that are not records with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perftracker.collectors.counters.sched import load_window_records, nonneg_int
from perftracker.store import LoadNote

RECORD_KEYS = frozenset({"ts_ns", "rank", "pid", "state"})
STATES = frozenset("RSDTtZXIWPK")


def read_state(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The state letter of `pid`'s main thread, or None."""
    try:
        text = (proc_root / str(pid) / "stat").read_text()
    except OSError:
        return None
    close = text.rfind(")")  # the command name may hold spaces and parentheses
    rest = text[close + 1:].split() if close >= 0 else []
    return rest[0] if rest and rest[0] in STATES else None


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


def load_states_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[LoadNote]]:
    return load_window_records(path, "process-state records", _state_row)
