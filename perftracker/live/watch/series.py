"""The watcher's per-rank step series: the last steps of each rank, and whose turn it is to be judged.

`RankSeriesBook.add` keeps each rank's last SERIES_STEPS steps; `series_of(rank)` is its `StepSeries`;
`turn(known)` hands the rule at most RANKS_PER_LOOK ranks with new steps, unjudged longest first; `counted`
is how many steps after the warm-up it holds; `clear()` forgets them all.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from perftracker.live.diagnosis import LiveDiagnosis
from perftracker.store.alarms import Alarm, StepSeries

SERIES_STEPS = 400  # per rank: the rules look at 20 x N steps at most (N = 10 by default)
RANKS_PER_LOOK = 4  # the degradation rule judges at most this many ranks a second (round robin): bounded CPU
BURST_SERIES = 60  # per rank: the burst rule looks at the last 20 x N bursts at most (N = 3)


def levels(rank: int, durations_s: np.ndarray, n: int, current: dict[int, float], best: dict[int, float]) -> None:
    """A rank's current level (mean of its last `n` durations, s) into `current`, its best earlier mean of `n` into
    `best`, once it has that many."""
    if len(durations_s) >= n:
        means = np.convolve(durations_s, np.ones(n) / n, mode="valid")
        current[rank] = float(means[-1])
        if len(durations_s) >= 2 * n:
            best[rank] = float(means[:-n].min())


class _RankSteps:
    """One rank's last `maxlen` (step, duration ns) pairs, as they came."""

    __slots__ = ("pairs", "ordered")

    def __init__(self, maxlen: int = SERIES_STEPS) -> None:
        self.pairs: deque[tuple[int, int]] = deque(maxlen=maxlen)
        self.ordered = True  # every step came after the one before (one source; the usual case)

    def add(self, step: int, duration_ns: int) -> None:
        self.ordered = self.ordered and not (self.pairs and step < self.pairs[-1][0])
        self.pairs.append((step, duration_ns))

    def series(self, rank: int) -> StepSeries:
        """The series in step order (sorted once when steps came out of order)."""
        if not self.ordered:
            self.pairs, self.ordered = deque(sorted(self.pairs), maxlen=self.pairs.maxlen), True
        n = len(self.pairs)
        return StepSeries(rank, np.fromiter((s for s, _ in self.pairs), dtype=np.int64, count=n),
                          np.fromiter((d for _, d in self.pairs), dtype=np.int64, count=n))


class RankSeriesBook:
    """Each rank's recent steps, their series in step order, and the ranks the degradation rule has yet to judge."""

    __slots__ = ("_series", "_built", "fresh", "_judged")

    def __init__(self) -> None:
        self._series: dict[int, _RankSteps] = {}  # rank -> its last steps, as they came
        self._built: dict[int, StepSeries] = {}  # rank -> its series in step order, until new steps
        self.fresh: set[int] = set()  # ranks with steps the degradation rule has not judged yet
        self._judged: dict[int, int] = {}  # rank -> when (in steps read) it was last judged

    def add(self, rank: int, step: int, duration_ns: int) -> None:
        series = self._series.get(rank)
        if series is None:
            series = self._series[rank] = _RankSteps()
        series.add(step, duration_ns)
        self.fresh.add(rank)
        self._built.pop(rank, None)

    def ranks(self) -> list[int]:
        return sorted(self._series)

    def series_of(self, rank: int) -> StepSeries:
        """One rank's series in step order (built when asked, kept until its next step)."""
        built = self._built.get(rank)
        if built is None:
            built = self._built[rank] = self._series[rank].series(rank)
        return built

    def counted(self, rank: int) -> int:
        """Steps after the first two (the warm-up) in a rank's series."""
        series = self._series.get(rank)
        return sum(1 for step, _ in series.pairs if step >= 2) if series is not None else 0

    def turn(self, known: int) -> list[StepSeries]:
        """The series of the ranks with new steps, at most RANKS_PER_LOOK, longest unjudged first; `known` (the
        step records read so far) marks when they were judged."""
        turn = sorted(self.fresh, key=lambda r: self._judged.get(r, 0))[:RANKS_PER_LOOK]
        self.fresh.difference_update(turn)
        self._judged.update((r, known) for r in turn)
        return [self.series_of(r) for r in sorted(turn)]

    def clear(self) -> None:
        self._series.clear()
        self._built, self.fresh = {}, set()


class BurstSeries:
    """The watcher's per-rank series of burst periods (from `source: "stacks"` records), judged apart from real
    steps: one value per burst, the coarse degradation rule with its own window."""

    __slots__ = ("window", "_series", "_fresh")

    def __init__(self, window: int = 3) -> None:
        self.window = window
        self._series: dict[int, _RankSteps] = {}  # rank -> its (burst, period ns)
        self._fresh: set[int] = set()

    def add(self, record: dict[str, Any]) -> None:
        rank = int(record["rank"])
        series = self._series.setdefault(rank, _RankSteps(BURST_SERIES))
        series.add(int(record["step"]), int(record["end_ns"]) - int(record["start_ns"]))
        self._fresh.add(rank)

    def ready(self) -> bool:
        """A rank has enough bursts to judge: two windows."""
        return self.most() >= 2 * self.window

    def most(self) -> int:
        """The most bursts any rank has (the panel's arming count)."""
        return max((len(s.pairs) for s in self._series.values()), default=0)

    def judge(self, diagnosis: LiveDiagnosis, rise: float, armed: bool, current: dict[int, float],
              best: dict[int, float]) -> Alarm | None:
        """The burst rule on the ranks with new bursts (once a burst: cheap), None when not armed or none came; the
        panel's levels of those ranks into `current` and `best`."""
        fresh, self._fresh = sorted(self._fresh), set()
        if not fresh:
            return None
        looked = [self._series[rank].series(rank) for rank in fresh]
        for s in looked:
            levels(s.rank, s.durations_ns.astype(float) / 1e9, self.window, current, best)
        return diagnosis.burst_alarm(looked, self.window, rise) if armed else None

    def clear(self) -> None:
        """After a degradation incident: the slower level becomes the new normal."""
        self._series.clear()
        self._fresh.clear()
