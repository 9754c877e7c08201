"""Where attach's own CPU went beyond its collectors' `sample` calls: every thread's time and the garbage collector's.

`thread_cpu_s()` is each Python thread's CPU from /proc; `GcClock` counts the collector's passes per
generation; `freeze_startup_objects()` moves what survived start-up out of the collector's way. The session
writes them into the host manifest's `cpu_s`.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Any

from perftracker.collectors.counters.sched import stat_fields

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100


def _task_cpu_s(native_id: int) -> float | None:
    """utime + stime of one thread of this process in seconds, None when /proc does not say."""
    fields = stat_fields(f"/proc/self/task/{native_id}/stat")
    if fields is None:
        return None
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return None


def thread_cpu_s() -> dict[str, float]:
    """Python thread name -> its CPU seconds so far (threads of one name summed)."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.native_id is None:
            continue
        spent = _task_cpu_s(thread.native_id)
        if spent is not None:
            out[thread.name] = round(out.get(thread.name, 0.0) + spent, 3)
    return out


class GcClock:
    """How many passes the cyclic collector made per generation since `start()`: counted, not timed (a callback
    inside every pass would swallow a SIGTERM's KeyboardInterrupt)."""

    __slots__ = ("_at_start",)

    def __init__(self) -> None:
        self._at_start: list[int] = [0, 0, 0]

    def start(self) -> None:
        self._at_start = [int(g["collections"]) for g in gc.get_stats()]

    def summary(self) -> dict[str, Any]:
        now = [int(g["collections"]) for g in gc.get_stats()]
        return {"passes": [n - s for n, s in zip(now, self._at_start)]}


def freeze_startup_objects() -> None:
    """One collection, then everything alive is left out of later collections (see the module docstring)."""
    gc.collect()
    gc.freeze()
