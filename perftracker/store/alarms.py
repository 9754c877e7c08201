"""What the watcher's online rules say when they fire: one `Alarm`, shared by live (which captures an
incident for it) and analyzers/online (whose rules raise it). Plain, typed records with no behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

KINDS = ("degradation", "hang", "host")


@dataclass(frozen=True, eq=False)
class StepSeries:
    """One rank's recent steps, oldest first: step numbers and their durations (ns), as int64 arrays."""

    rank: int
    steps: np.ndarray
    durations_ns: np.ndarray

    def __init__(self, rank: int, steps: Sequence[int] | np.ndarray, durations_ns: Sequence[int] | np.ndarray) -> None:
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "steps", np.asarray(steps, dtype=np.int64))
        object.__setattr__(self, "durations_ns", np.asarray(durations_ns, dtype=np.int64))


@dataclass(frozen=True)
class Alarm:
    """One online rule firing."""

    kind: str
    text: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    step: int = -1
    current_s: float | None = None  # degradation: mean of the last N steps
    best_s: float | None = None  # degradation: the recent best mean of N steps
    confidence: float | None = None
    details: tuple[str, ...] = field(default_factory=tuple)  # further lines (host signals, per-rank rises)
    source: str = ""  # the step signal: "" (step records) or "stacks" (burst periods of sampled stacks)
