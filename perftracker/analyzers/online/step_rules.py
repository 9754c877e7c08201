"""The watcher's step rules. Degradation: the mean of the last N steps more than X above the recent best, confirmed
by a change-point test that gives the step it began at and beats the run's own noise; `degradation_alarm(series,
window, rise)` is one `Alarm` naming the ranks whose series fired, or None. Hang: no step for K times the typical
step (and at least a floor), per job; `hang_alarm(...)` is an `Alarm` when `step_stall` says so, else None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from perftracker.analyzers.stragglers.degradation import change_point_of
from perftracker.analyzers.thresholds import default, threshold, threshold_int
from perftracker.store.alarms import Alarm, StepSeries

DEFAULT_WINDOW = 10
DEFAULT_RISE = 0.20
CONFIRM_WINDOWS = default("online.steps.confirm_windows")  # the default, for callers; rules read the run's value


def trigger(durations_s: np.ndarray, window: int, rise: float,
            horizon_windows: int | None = None) -> tuple[float, float] | None:
    """(current mean, best mean) when the last `window` values' mean is more than `rise` above the best earlier
    mean of `window` values within the last `horizon_windows` x `window` (the run's
    `online.steps.horizon_windows` unless given; the burst rule gives its own); None otherwise."""
    if len(durations_s) < 2 * window:
        return None
    horizon = threshold_int("online.steps.horizon_windows") if horizon_windows is None else horizon_windows
    recent = durations_s[-horizon * window:]
    means = np.convolve(recent, np.ones(window) / window, mode="valid")
    current, best = float(means[-1]), float(means[:-window].min())
    return (current, best) if best > 0 and current > best * (1.0 + rise) else None


def recheck_steps(window: int) -> int:
    """How many more steps a rank needs before a confirmation that said no is asked again."""
    return max(1, window // 2)


class Rechecks:
    """Per rank, the last step of its series when its confirmation last said no (the trigger had fired)."""

    def __init__(self) -> None:
        self.declined_at: dict[int, int] = {}

    def due(self, rank: int, last_step: int, window: int) -> bool:
        """Is the confirmation worth asking again: no "no" yet, enough steps since, or the steps started over?"""
        seen = self.declined_at.get(rank)
        return seen is None or last_step < seen or last_step - seen >= recheck_steps(window)

    def declined(self, rank: int, last_step: int) -> None:
        self.declined_at[rank] = last_step

    def forget(self, rank: int) -> None:
        self.declined_at.pop(rank, None)


def series_alarm(series: StepSeries, window: int = DEFAULT_WINDOW, rise: float = DEFAULT_RISE,
                 rechecks: Rechecks | None = None) -> Alarm | None:
    """The degradation alarm of one rank's series (docs/internals/analyzers.md), or None."""
    kept = series.steps >= threshold_int("online.steps.warmup_steps")
    if int(kept.sum()) < 2 * window:
        return None
    steps = series.steps[kept]
    y = series.durations_ns[kept].astype(float) / 1e9
    fired = trigger(y, window, rise)
    rechecks = rechecks if rechecks is not None else Rechecks()  # none kept: every firing is confirmed at once
    if fired is None:
        rechecks.forget(series.rank)  # the trigger fell back: its next firing is confirmed at once
        return None
    last = int(steps[-1])
    if not rechecks.due(series.rank, last, window):
        return None
    tail = slice(max(0, len(y) - threshold_int("online.steps.confirm_windows") * window), len(y))
    cp = change_point_of(y[tail], steps[tail])
    if cp is None or not cp.verdict.significant or cp.rise < rise:
        rechecks.declined(series.rank, last)
        return None
    rechecks.forget(series.rank)
    current, best = fired
    who = "the job" if series.rank < 0 else f"rank {series.rank}"
    return Alarm("degradation", f"{who}: the last {window} steps take {current * 1e3:.1f} ms on average, "
                 f"{100 * (current / best - 1):.0f}% above the recent best {best * 1e3:.1f} ms; slower since step "
                 f"{cp.step} (median {cp.before_s * 1e3:.1f} -> {cp.after_s * 1e3:.1f} ms, confidence "
                 f"{cp.verdict.confidence:.3f})", ranks=(series.rank,), step=cp.step, current_s=current, best_s=best,
                 confidence=cp.verdict.confidence)


def degradation_alarm(series: Iterable[StepSeries], window: int = DEFAULT_WINDOW,
                      rise: float = DEFAULT_RISE, rechecks: Rechecks | None = None) -> Alarm | None:
    """One alarm for every series that fired (the earliest change point is the step it began at)."""
    fired = [a for a in (series_alarm(s, window, rise, rechecks) for s in series) if a is not None]
    return joined_alarm(fired, "{n} series slower (ranks {ranks})")


def joined_alarm(fired: list[Alarm], many: str) -> Alarm | None:
    """One alarm for the series that fired, led by the earliest (`many`: the lead's head with {n} and {ranks})."""
    if not fired:
        return None
    first = min(fired, key=lambda a: (a.step, -(a.current_s or 0.0) / (a.best_s or 1.0)))
    ranks = tuple(sorted(r for a in fired for r in a.ranks))
    head = many.format(n=len(fired), ranks=", ".join(map(str, ranks)))
    return Alarm("degradation", first.text if len(fired) == 1 else f"{head}; {first.text}", ranks=ranks,
                 step=first.step, current_s=first.current_s, best_s=first.best_s, confidence=first.confidence,
                 details=tuple(a.text for a in fired), source=first.source)


def step_stall(quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
    """None when the steps known are too few to judge, "" when they keep coming, else why it is a stall."""
    if median_step_ns is None or quiet_ns is None or steps_known < threshold_int("online.hang.min_steps"):
        return None
    if quiet_ns <= max(threshold("online.hang.stall_factor") * median_step_ns,
                       threshold("online.hang.min_stall_s") * 1e9):
        return ""
    factor = threshold("online.hang.stall_factor")
    return (f"no step for {quiet_ns / 1e9:.0f} s ({factor:g}x the median step time is "
            f"{factor * median_step_ns / 1e9:.1f} s)")


def hang_alarm(last_step: Mapping[int, int], last_step_ns: Mapping[int, int], median_step_ns: int | None,
               steps_known: int, now_ns: int) -> Alarm | None:
    if not last_step_ns:
        return None
    newest = max(last_step_ns.values())
    verdict = step_stall(now_ns - newest, median_step_ns, steps_known)
    if not verdict:
        return None
    oldest = min(last_step_ns.values())
    quiet = tuple(sorted(r for r, ns in last_step_ns.items() if ns <= oldest + 1_000_000_000))
    step = max(last_step.values()) if last_step else -1
    return Alarm("hang", f"{verdict}; last step {step}", ranks=quiet, step=step)
