"""The job's step progress as the live side knows it, kept in one place with one typical step.

`StepState.add` takes one step record; `last_step` / `last_step_ns` hold each rank's latest step and its wall
time, and `median_step_ns()` is THE typical step for every live question about pace (recomputed at most every
MEDIAN_S). Not thread-safe: its owner holds `ctx.lock`. `StepFeed` hands the records the steps sampler read to
the watcher, parsed, so that each record is read once.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

RECENT_STEPS = 1600  # durations of all ranks the typical step is the median of (200 a rank for 8 ranks)
MEDIAN_S = 10.0  # the typical step is computed again at most this often while steps come (it moves slowly)
FEED_RECORDS = 64 * 1024


class StepState:
    """Each rank's latest step and its wall time, the recent step durations of all ranks, the typical step."""

    __slots__ = ("last_step", "last_step_ns", "known", "recent", "_median_ns", "_median_at")

    def __init__(self) -> None:
        self.last_step: dict[int, int] = {}  # rank -> last step seen
        self.last_step_ns: dict[int, int] = {}  # rank -> wall time (ns) that step ended
        self.known = 0  # step records taken
        self.recent: deque[int] = deque(maxlen=RECENT_STEPS)  # durations (ns), all ranks
        self._median_ns: int | None = None
        self._median_at = 0.0  # monotonic time it was computed

    def add(self, rank: int, step: int, start_ns: int, end_ns: int) -> None:
        if step >= self.last_step.get(rank, -1):
            self.last_step[rank], self.last_step_ns[rank] = step, end_ns
        self.recent.append(end_ns - start_ns)
        self.known += 1
        if self._median_ns is not None and time.monotonic() - self._median_at >= MEDIAN_S:
            self._median_ns = None

    def median_step_ns(self) -> int | None:
        """The typical step (ns) of the job, None before any step came."""
        if self._median_ns is None and self.recent:
            self._median_ns, self._median_at = int(statistics.median(self.recent)), time.monotonic()
        return self._median_ns

    def set_durations(self, durations_ns: Iterable[int]) -> None:
        """Replace the recent durations (and the count of records known) with these."""
        self.recent.clear()
        self.recent.extend(int(d) for d in durations_ns)
        self.known, self._median_ns = len(self.recent), None

    def restart(self) -> None:
        """Forget the typical step (a slowdown became the new normal): it is built again from the next steps."""
        self.recent.clear()
        self._median_ns = None


class StepFeed:
    """A bounded, thread-safe queue of parsed step records: the steps sampler `publish`es what it writes, the
    watcher `take`s what came since its last look. Past `maxlen` the oldest are dropped (counted in `dropped`)."""

    __slots__ = ("maxlen", "dropped", "_records", "_lock")

    def __init__(self, maxlen: int = FEED_RECORDS) -> None:
        self.maxlen = maxlen
        self.dropped = 0
        self._records: deque[dict[str, Any]] = deque(maxlen=maxlen)  # past it, extending drops the oldest
        self._lock = threading.Lock()

    def publish(self, records: Iterable[dict[str, Any]]) -> None:
        batch = list(records)
        with self._lock:
            before = len(self._records)
            self._records.extend(batch)
            self.dropped += before + len(batch) - len(self._records)

    def take(self) -> list[dict[str, Any]]:
        """Every record published since the last call, in the order published."""
        with self._lock:
            taken = list(self._records)
            self._records.clear()
        return taken
