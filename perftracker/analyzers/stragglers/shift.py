"""Is a later stretch of steps really slower than the earlier one, beyond this run's own noise?

Promise: `judge_shift(before, after, candidates)` takes the step times before and after a change
point that a caller picked by scanning `candidates` possible splits, and returns a `ShiftVerdict`:

- **Rank test, corrected for the scan and for runs of similar steps.** A one-sided Mann-Whitney U test
  (normal approximation with continuity and tie correction) of "after is slower than before". Step
  times are not independent (a busy minute on the machine slows several steps in a row, as the
  collectives of one step are one trial for the straggler test), so its z-score is shrunk to the
  effective number of steps, n (1 - r) / (1 + r) for the lag-1 autocorrelation r of the steps around
  their segment's median. The p-value is then multiplied by the number of candidate splits
  (Bonferroni: the caller chose the best split after looking), so that a run whose step time only
  wanders shows a "slower since step N" warning in about 1% of runs (`ALPHA`; measured on simulated
  autocorrelated noise in tests/analyzers/stragglers/test_noise_discipline.py). The price is power on short windows: with
  strongly autocorrelated steps, a few dozen steps cannot show a rise whatever its size; hundreds can.
- **Sustained, not a bump.** Both halves of the later stretch have their median above the earlier
  stretch's upper quartile: a burst of slow steps that ends before the window does is not a slowdown.
- **Enough steps.** At least `MIN_SIDE` steps on each side.

`confidence` is 1 - (corrected p), in [0, 1]. Pure statistics over arrays: nothing here reads the Store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perftracker.analyzers.thresholds import threshold, threshold_int


@dataclass(frozen=True)
class ShiftVerdict:
    """What the step times support about a rise after a change point."""

    significant: bool
    confidence: float
    p_corrected: float
    sustained: bool
    autocorrelation: float = 0.0
    reason: str = ""  # why it is not significant, for people


def median_sorted(ordered: np.ndarray) -> float:
    """The median of a sorted array, as np.median gives it (the mean of the two middle values), without its
    checks (this runs for every rank the watcher confirms)."""
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
    """The bias-corrected lag-1 autocorrelation of residuals, as np.corrcoef computes it (0 when undefined)."""
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
    return min(r + (1.0 + 3.0 * r) / len(residuals), 0.95)  # short series underestimate it by about (1 + 3r) / n


def lag1_autocorrelation(before: np.ndarray, after: np.ndarray) -> float:
    """Lag-1 autocorrelation of the steps around their own segment's median (0 when undefined), corrected
    for the bias of short series."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    middle = [median_sorted(np.sort(side)) if len(side) else float("nan") for side in (before, after)]
    return _lag1(np.concatenate([before - middle[0], after - middle[1]]))


def mann_whitney_greater(before: np.ndarray, after: np.ndarray, shrink: float = 1.0) -> float:
    """One-sided p-value that `after` tends to be larger than `before` (normal approximation); `shrink`
    (0-1] scales the z-score for dependent samples (sqrt of effective over actual sample size). Ties get the
    average of their ranks, each run of equal values found in one sort."""
    n1, n2 = len(before), len(after)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = np.concatenate([before, after]).astype(float, copy=False)
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


def judge_shift(before: np.ndarray, after: np.ndarray, candidates: int, alpha: float | None = None) -> ShiftVerdict:
    """See the module docstring. `candidates`: how many split points the caller scanned (>= 1); `alpha`:
    the run's `shift.alpha` unless given. Small arrays, no pandas: the watcher confirms ranks with it live."""
    alpha = threshold("shift.alpha") if alpha is None else alpha
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if min(len(before), len(after)) < threshold_int("shift.min_side"):
        return ShiftVerdict(False, 0.0, 1.0, False, 0.0,
                            f"{len(before)} step(s) before and {len(after)} after: too few to judge")
    sorted_before = np.sort(before)
    residuals = np.concatenate([before - median_sorted(sorted_before), after - median_sorted(np.sort(after))])
    r = max(_lag1(residuals), 0.0)
    shrink = math.sqrt((1.0 - r) / (1.0 + r))
    p = min(1.0, mann_whitney_greater(before, after, shrink) * max(candidates, 1))
    upper_quartile = _upper_quartile(sorted_before)
    half = len(after) // 2
    sustained = all(median_sorted(np.sort(part)) > upper_quartile for part in (after[:half], after[half:]))
    if not sustained:
        reason = "the later steps came back to the earlier level: a stretch of slow steps, not a lasting slowdown"
    elif p > alpha:
        reason = (f"a rise this size appears by chance in {100 * p:.0f}% of runs with this much step-to-step "
                  "variation: record more steps to tell")
    else:
        reason = ""
    return ShiftVerdict(sustained and p <= alpha, 1.0 - p, p, sustained, r, reason)
