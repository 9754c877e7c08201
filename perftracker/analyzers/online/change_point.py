"""The degradation rule's confirmation, lean: the offline change point and its verdict on a short numpy series,
without pandas and with each side sorted once.

Promise: `change_point(durations_s, steps)` returns what
`analyzers/stragglers/degradation.change_point(pd.Series(durations_s, index=steps))` returns (the same split,
step, medians and `judge_shift` verdict), computed with the same formulas in the same order: the
least-squares split scan, medians read from one sort of each side (numpy's median of the two middle values),
the lag-1 autocorrelation as `np.corrcoef` computes it, the Mann-Whitney rank sum with ties averaged over
each run of equal values (as `np.unique`'s counts do), the upper quartile by numpy's linear interpolation.
It exists because the watcher may confirm up to RANKS_PER_LOOK ranks a second, and the offline path's small-array
overhead (a pandas Series, np.median's and np.percentile's checks, np.unique, np.cov) is most of its cost
on 100 steps. tests/online/test_online_change_point.py holds it equal to the offline one on the recorded
series of tests/fixtures/accuracy and on random series.
"""

from __future__ import annotations

import math

import numpy as np

from perftracker.analyzers.stragglers.degradation import ChangePoint, best_split
from perftracker.analyzers.stragglers.shift import ShiftVerdict
from perftracker.analyzers.thresholds import threshold, threshold_int


def _median(ordered: np.ndarray) -> float:
    """The median of a sorted array, as np.median gives it (the mean of the two middle values)."""
    n = len(ordered)
    half = n // 2
    if n % 2:
        return float(ordered[half])
    return float(np.mean(ordered[half - 1:half + 1]))


def _upper_quartile(ordered: np.ndarray) -> float:
    """np.percentile(x, 75) of a sorted array (linear interpolation, numpy's lerp)."""
    virtual = 0.75 * (len(ordered) - 1)
    low = math.floor(virtual)
    high = min(low + 1, len(ordered) - 1)
    t = virtual - low
    a, b = float(ordered[low]), float(ordered[high])
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


def _lag1(residuals: np.ndarray) -> float:
    """`shift.lag1_autocorrelation` of residuals already taken around each segment's median."""
    if len(residuals) < 3 or float(np.std(residuals)) == 0.0:
        return 0.0
    pair = np.stack([residuals[:-1], residuals[1:]])
    pair -= pair.mean(axis=1)[:, None]
    c = np.dot(pair, pair.T.conj()) * np.true_divide(1, pair.shape[1] - 1)
    stddev = np.sqrt(np.diag(c).real)
    c /= stddev[:, None]
    c /= stddev[None, :]
    r = float(np.clip(c.real, -1, 1)[0, 1])
    if r != r:
        return 0.0
    return min(r + (1.0 + 3.0 * r) / len(residuals), 0.95)


def _mann_whitney_greater(before: np.ndarray, after: np.ndarray, shrink: float) -> float:
    """`shift.mann_whitney_greater`, with the tie runs found in one sort."""
    n1, n2 = len(before), len(after)
    pooled = np.concatenate([before, after])
    order = pooled.argsort(kind="stable")
    ordered = pooled[order]
    n = n1 + n2
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(starts, n))
    mean_rank = starts + (counts + 1) / 2.0  # the average of the ranks starts+1 .. starts+counts
    ranks = np.empty(n, dtype=float)
    ranks[order] = np.repeat(mean_rank, counts)
    u_after = float(ranks[n1:].sum()) - n2 * (n2 + 1) / 2.0
    tie_term = float((counts ** 3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if variance <= 0:
        return 1.0
    z = (u_after - n1 * n2 / 2.0 - 0.5) / math.sqrt(variance) * shrink
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _judge(before: np.ndarray, after: np.ndarray, sorted_before: np.ndarray, before_median: float,
           after_median: float, candidates: int) -> ShiftVerdict:
    """`shift.judge_shift(before, after, candidates)` (both sides have MIN_SIDE steps or more here)."""
    residuals = np.concatenate([before - before_median, after - after_median])
    r = max(_lag1(residuals), 0.0)
    shrink = math.sqrt((1.0 - r) / (1.0 + r))
    p = min(1.0, _mann_whitney_greater(before, after, shrink) * max(candidates, 1))
    upper = _upper_quartile(sorted_before)
    half = len(after) // 2
    sustained = all(_median(np.sort(part)) > upper for part in (after[:half], after[half:]))
    if not sustained:
        reason = "the later steps came back to the earlier level: a stretch of slow steps, not a lasting slowdown"
    elif p > threshold("shift.alpha"):
        reason = (f"a rise this size appears by chance in {100 * p:.0f}% of runs with this much step-to-step "
                  "variation: record more steps to tell")
    else:
        reason = ""
    return ShiftVerdict(sustained and p <= threshold("shift.alpha"), 1.0 - p, p, sustained, r, reason)


def change_point(durations_s: np.ndarray, steps: np.ndarray) -> ChangePoint | None:
    """The most likely single shift in mean when it is a rise of RISE or more, with its verdict (see above)."""
    y = np.asarray(durations_s, dtype=float)
    split = best_split(y)  # the offline scan itself: only the verdict below is the lean twin
    if split is None:
        return None
    best, scanned = split
    before, after = y[:best], y[best:]
    sorted_before = np.sort(before)
    b, a = _median(sorted_before), _median(np.sort(after))
    if b <= 0 or a / b - 1.0 < threshold("degradation.rise"):
        return None
    assert min(len(before), len(after)) >= threshold_int("shift.min_side")  # margin >= 5 = MIN_SIDE
    return ChangePoint(int(steps[best]), b, a, _judge(before, after, sorted_before, b, a, scanned))
