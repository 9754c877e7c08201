"""The step records the steps sampler read, handed to the watcher parsed, so that each record is read and
parsed once.

Promise: `StepFeed` is a bounded, thread-safe queue of step records (the dicts
`collectors.steps.parse_step_line` returns, exactly as `steps/rank-<r>.jsonl` holds them). The steps
sampler (`live/samplers/steps_sampler.py`), the one reader of the job's step sources, `publish`es every record it
writes into the run directory (the hook's, --job-log's and the job output's alike); the watcher
(`live/watch/watcher.py`) `take`s what came since its last look instead of reading the step files again. At most
`maxlen` records wait (the hook's history at attach can be larger: the oldest are then dropped and counted
in `dropped`; the watcher keeps only the last few hundred steps per rank anyway).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FEED_RECORDS = 64 * 1024


@dataclass
class StepFeed:
    maxlen: int = FEED_RECORDS
    dropped: int = 0
    _records: deque[dict[str, Any]] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, records: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            self._records.extend(records)
            over = len(self._records) - self.maxlen
            for _ in range(max(0, over)):
                self._records.popleft()
            self.dropped += max(0, over)

    def take(self) -> list[dict[str, Any]]:
        """Every record published since the last call, in the order published."""
        with self._lock:
            taken = list(self._records)
            self._records.clear()
        return taken
