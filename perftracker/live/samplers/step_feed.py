"""The step records the steps sampler read, handed to the watcher parsed, so that each record is read once.

`StepFeed` is a bounded, thread-safe queue of parsed step records: the steps sampler `publish`es what it writes,
the watcher `take`s what came since its last look. Past `maxlen` the oldest are dropped (counted in `dropped`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

FEED_RECORDS = 64 * 1024


class StepFeed:
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
