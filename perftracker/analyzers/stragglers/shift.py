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
  autocorrelated noise in tests/test_noise_discipline.py). The price is power on short windows: with
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


def lag1_autocorrelation(before: np.ndarray, after: np.ndarray) -> float:
    """Lag-1 autocorrelation of the steps around their own segment's median (0 when undefined), corrected
    for the bias of short series."""
    residuals = np.concatenate([before - np.median(before), after - np.median(after)])
    if len(residuals) < 3 or float(np.std(residuals)) == 0.0:
        return 0.0
    r = float(np.corrcoef(residuals[:-1], residuals[1:])[0, 1])
    if r != r:
        return 0.0
    return min(r + (1.0 + 3.0 * r) / len(residuals), 0.95)  # short series underestimate it by about (1 + 3r) / n


def mann_whitney_greater(before: np.ndarray, after: np.ndarray, shrink: float = 1.0) -> float:
    """One-sided p-value that `after` tends to be larger than `before` (normal approximation); `shrink`
    (0-1] scales the z-score for dependent samples (sqrt of effective over actual sample size)."""
    n1, n2 = len(before), len(after)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = np.concatenate([before, after])
    order = pooled.argsort(kind="stable")
    ranks = np.empty(len(pooled), dtype=float)
    ranks[order] = np.arange(1, len(pooled) + 1, dtype=float)
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    mean_rank = np.bincount(inverse, weights=ranks) / counts  # average ranks of ties
    ranks = mean_rank[inverse]
    u_after = float(ranks[n1:].sum()) - n2 * (n2 + 1) / 2.0
    n = n1 + n2
    tie_term = float((counts ** 3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if variance <= 0:
        return 1.0
    z = (u_after - n1 * n2 / 2.0 - 0.5) / math.sqrt(variance) * shrink
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def judge_shift(before: np.ndarray, after: np.ndarray, candidates: int, alpha: float | None = None) -> ShiftVerdict:
    """See the module docstring. `candidates`: how many split points the caller scanned (>= 1); `alpha`:
    the run's `shift.alpha` unless given."""
    alpha = threshold("shift.alpha") if alpha is None else alpha
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if min(len(before), len(after)) < threshold_int("shift.min_side"):
        return ShiftVerdict(False, 0.0, 1.0, False, 0.0,
                            f"{len(before)} step(s) before and {len(after)} after: too few to judge")
    r = max(lag1_autocorrelation(before, after), 0.0)
    shrink = math.sqrt((1.0 - r) / (1.0 + r))
    p_test = mann_whitney_greater(before, after, shrink)
    p = min(1.0, p_test * max(candidates, 1))
    upper_quartile = float(np.percentile(before, 75))
    half = len(after) // 2
    sustained = all(float(np.median(part)) > upper_quartile for part in (after[:half], after[half:]))
    if not sustained:
        reason = "the later steps came back to the earlier level: a stretch of slow steps, not a lasting slowdown"
    elif p > alpha:
        reason = (f"a rise this size appears by chance in {100 * p:.0f}% of runs with this much step-to-step "
                  "variation: record more steps to tell")
    else:
        reason = ""
    return ShiftVerdict(sustained and p <= alpha, 1.0 - p, p, sustained, r, reason)
