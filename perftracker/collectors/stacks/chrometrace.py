"""Read a `py-spy record --format chrometrace` recording into each thread's stacks in time order.

Promise: `read_burst(path, rank, rate_hz, started_ns)` returns the `StackBurst` of the recording's main thread,
or raises `InputError` saying what is wrong with the file. Read within `perftracker.bounded`'s limits, never
evaluated. The format: docs/internals/collectors.md.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from perftracker.bounded import load_json_file
from perftracker.errors import InputError
from perftracker.store.stack_frames import StackBurst

THREAD_PREFIX = "thread ("


def _frame(event: dict[str, Any]) -> str:
    raw = event.get("args")
    args: dict[str, Any] = raw if isinstance(raw, dict) else {}
    name, filename, line = str(event.get("name", "?")), str(args.get("filename", "")), args.get("line", 0)
    return f"{name} ({Path(filename).name}:{line})" if filename else name


def _threads(events: list[Any]) -> dict[Any, list[tuple[float, tuple[str, ...]]]]:
    """tid -> [(time s, stack after every event of that time)], in time order."""
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for ev in events:
        if isinstance(ev, dict) and ev.get("ph") in ("B", "E") and isinstance(ev.get("ts"), int | float):
            by_tid[ev.get("tid")].append(ev)
    out: dict[Any, list[tuple[float, tuple[str, ...]]]] = {}
    for tid, evs in by_tid.items():
        evs.sort(key=lambda e: e["ts"])  # stable: B/E of one time keep py-spy's order
        stack: list[str] = []
        changes: list[tuple[float, tuple[str, ...]]] = []
        for i, ev in enumerate(evs):
            if ev["ph"] == "B":
                stack.append(_frame(ev))
            elif stack:
                stack.pop()
            if i + 1 == len(evs) or evs[i + 1]["ts"] != ev["ts"]:
                changes.append((float(ev["ts"]) / 1e6, tuple(stack)))
        out[tid] = changes
    return out


def _is_main(changes: list[tuple[float, tuple[str, ...]]]) -> bool:
    return any(stack and stack[0].startswith(THREAD_PREFIX) and stack[0].endswith("MainThread")
               for _, stack in changes[:50])


def read_burst(path: Path, rank: int, rate_hz: float, started_ns: int = 0) -> StackBurst:
    """The main thread's stacks of one chrometrace recording (docs/internals/collectors.md)."""
    try:
        events = load_json_file(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a py-spy chrometrace recording ({exc})") from None
    if not isinstance(events, list):
        raise InputError(f"{path}: not a py-spy chrometrace recording (a JSON list of trace events)")
    threads = _threads(events)
    if not threads:
        return StackBurst(rank, rate_hz, (), (), 0.0, started_ns)
    mains = [tid for tid, ch in threads.items() if _is_main(ch)]
    tid = mains[0] if mains else max(threads, key=lambda t: len(threads[t]))
    changes = threads[tid]
    end_s = changes[-1][0]
    kept = changes[:-1] if not changes[-1][1] else changes  # the final events close every frame: the end
    stacks = tuple(stack[1:] if stack and stack[0].startswith(THREAD_PREFIX) else stack for _, stack in kept)
    return StackBurst(rank, rate_hz, tuple(t for t, _ in kept), stacks, end_s, started_ns)
