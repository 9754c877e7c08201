"""The watcher's degradation rule for coarse step series: one value per sampled-stack burst per rank (the mean
iteration period of a 5 s burst, `live/samplers/stack_steps.py`), not one per step.

`burst_alarm(series, window, rise)`: one `Alarm` (kind "degradation", source "stacks") naming the ranks whose
burst series fired, or None.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from perftracker.analyzers.online.step_rules import joined_alarm, trigger
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.store.alarms import Alarm, StepSeries
from perftracker.values import robust_sigma

DEFAULT_WINDOW = 3
SOURCE = "stacks"


def series_alarm(series: StepSeries, window: int = DEFAULT_WINDOW, rise: float = 0.2) -> Alarm | None:
    """The degradation alarm of one rank's burst series, or None."""
    y = series.durations_ns.astype(float)[-threshold_int("online.burst.horizon_windows") * window:] / 1e9
    steps = series.steps[-threshold_int("online.burst.horizon_windows") * window:]
    fired = trigger(y, window, rise, threshold_int("online.burst.horizon_windows"))  # the step rule's trigger
    if fired is None:
        return None
    current, best = fired
    recent, earlier = y[-window:], y[:-window]
    line = best * (1.0 + rise / 2)
    if float(recent.min()) <= line:
        return None
    spread = max(robust_sigma(earlier),
                 threshold("online.burst.min_spread") * best)
    if current - best <= threshold("online.burst.noise_k") * spread:
        return None
    below = np.nonzero(y <= line)[0]
    began = int(steps[below[-1] + 1]) if len(below) else int(steps[0])
    who = "the job" if series.rank < 0 else f"rank {series.rank}"
    return Alarm("degradation", f"{who} (step times from sampled stacks, one value per burst): the last {window} "
                 f"bursts' iteration period is {current * 1e3:.1f} ms on average, {100 * (current / best - 1):.0f}% "
                 f"above the recent best {best * 1e3:.1f} ms (spread {spread * 1e3:.1f} ms); slower since burst "
                 f"{began}", ranks=(series.rank,), step=began, current_s=current, best_s=best, source=SOURCE)


def burst_alarm(series: Iterable[StepSeries], window: int = DEFAULT_WINDOW, rise: float = 0.2) -> Alarm | None:
    """One alarm for every series that fired (the earliest burst it began at is the one given)."""
    return joined_alarm([a for a in (series_alarm(s, window, rise) for s in series) if a is not None],
                        "{n} ranks slower ({ranks})")
