"""The iteration period of a training loop from one rank's short sampled-stack recording, for jobs that offer no
other step signal (no hook, no step lines, no NCCL Inspector output).

Promise: `estimate_period(burst)` returns the `StepPeriod` of a `StackBurst` (the main thread's stacks in time
order, as `py-spy record --format chrometrace` gives them), or None when the burst shows no clear period: the
thread sat in one stack (idle, hung), the stacks do not repeat, or the period is longer than a third of the burst.

How: a training loop passes through the same sequence of stacks every iteration, so the stack sampled at time t
and the one at t + P are the same far more often than chance. The burst is put on the sampling grid (one value
per 1/rate s; py-spy writes a stack only when it changes, so the stack in effect is the one written last) and,
for each depth d (the stacks cut to their first d frames from the root, so that one id is "where the loop is"
rather than which leaf line was running), the self-similarity at each lag L is
R(L) = (P(s(t) = s(t+L)) - c) / (1 - c), with c = sum over ids of p_id^2 the chance of a match: 1 for an exact
repeat, 0 for no relation (the autocorrelation of the one-hot indicator series of the stack ids). The period is
the first lag whose R is a local peak within `HARMONIC_SHARE` of the highest peak (so a multiple of the period,
which repeats as well, is not taken for it), refined by the highest multiple k of it that is still a clear peak
(P = lag of that peak / k: k periods of jitter average out) and by parabolic interpolation. The depth with the
highest peak wins; its R is the confidence, and below `MIN_CONFIDENCE` there is no period.

Limits, at rate r and burst length T: periods from `MIN_SAMPLES_PER_PERIOD` / r (60 ms at 50 Hz, 30 ms at 100 Hz)
to T / `MIN_CYCLES` (1.7 s for a 5 s burst); precision about 1 / (r k) for k periods seen. The burst's period
is the mean over the burst: a loop whose iterations differ by a lot (gradient accumulation, evaluation inside the
burst) shows the period of its repeating unit. A job whose main thread only waits (the work in other threads or
on a GPU with the CPU asleep in one synchronize) still repeats if the wait's stack differs from the launch's;
one that sits in a single stack the whole burst has no period here (the hang rule and the stack dumps judge it).
"""

from __future__ import annotations

import numpy as np

from perftracker.store.stack_bursts import StackBurst, StepPeriod

MIN_CONFIDENCE = 0.3  # below this self-similarity the burst has no period (see the module docstring for R)
MIN_CYCLES = 3.0  # the burst must span at least 3 periods
MIN_SAMPLES_PER_PERIOD = 3
HARMONIC_SHARE = 0.8  # the period is the first peak at least this share of the highest peak
MAX_DEPTH = 24
MIN_SAMPLES = 30
ONE_STACK = 0.97  # c above this: one stack nearly all the time (idle, hung): no period


def grid_ids(burst: StackBurst, depth: int) -> np.ndarray:
    """The stack id (cut to `depth` frames) in effect at each point of the sampling grid; -1 where no sample."""
    if not burst.change_s or burst.rate_hz <= 0:
        return np.empty(0, dtype=np.int64)
    start = burst.change_s[0]
    n = int((burst.end_s - start) * burst.rate_hz)
    times = start + np.arange(max(0, n)) / burst.rate_hz
    segment = np.searchsorted(np.asarray(burst.change_s), times, side="right") - 1
    codes: dict[tuple[str, ...], int] = {}
    seg_ids = np.array([codes.setdefault(s[:depth], len(codes)) if s else -1 for s in burst.stacks], dtype=np.int64)
    return seg_ids[segment]


def similarity(ids: np.ndarray, max_lag: int) -> np.ndarray:
    """R(L) for L = 0..max_lag (see the module docstring); NaN where not defined."""
    out = np.full(max_lag + 1, np.nan)
    valid = ids >= 0
    _, counts = np.unique(ids[valid], return_counts=True)
    if counts.sum() == 0:
        return out
    p = counts / counts.sum()
    chance = float((p * p).sum())
    if chance >= ONE_STACK:
        return out
    for lag in range(1, min(max_lag, len(ids) - 1) + 1):
        a, b = ids[:-lag], ids[lag:]
        both = (a >= 0) & (b >= 0)
        if both.sum() < MIN_SAMPLES // 2:
            break
        out[lag] = (float((a[both] == b[both]).mean()) - chance) / (1.0 - chance)
    return out


def _peaks(r: np.ndarray, min_lag: int) -> list[int]:
    """Lags where R is a local maximum (ties: the first of a plateau), from min_lag on."""
    found = []
    for lag in range(max(1, min_lag), len(r) - 1):
        if np.isnan(r[lag]) or np.isnan(r[lag - 1]):
            continue
        after = r[lag + 1] if not np.isnan(r[lag + 1]) else -np.inf
        if r[lag] > r[lag - 1] and r[lag] >= after:
            found.append(lag)
    return found


def _refine(r: np.ndarray, lag: int) -> float:
    """The peak's lag with parabolic interpolation over its two neighbours."""
    if lag + 1 >= len(r) or np.isnan(r[lag + 1]) or np.isnan(r[lag - 1]):
        return float(lag)
    a, b, c = r[lag - 1], r[lag], r[lag + 1]
    denom = a - 2 * b + c
    return float(lag + 0.5 * (a - c) / denom) if denom < 0 else float(lag)


def _period_at_depth(r: np.ndarray, min_lag: int) -> tuple[float, float] | None:
    """(period in samples, confidence) from one depth's R, or None."""
    peaks = _peaks(r, min_lag)
    if not peaks:
        return None
    top = max(r[p] for p in peaks)
    if top < MIN_CONFIDENCE:
        return None
    first = next(p for p in peaks if r[p] >= HARMONIC_SHARE * top)
    period, confidence = _refine(r, first), float(r[first])
    for k in range(2, int((len(r) - 1) / first) + 1):  # the k-th repeat, where it is still a clear peak
        near = [p for p in peaks if abs(p - k * period) <= max(1.0, 0.15 * period)]
        if not near:
            break
        best = max(near, key=lambda p: r[p])
        if r[best] < max(MIN_CONFIDENCE, HARMONIC_SHARE * confidence):
            break
        period = _refine(r, best) / k
    return period, confidence


def estimate_period(burst: StackBurst) -> StepPeriod | None:
    """The iteration period of one burst, or None (see the module docstring)."""
    if len(burst.change_s) < 2 or burst.rate_hz <= 0:
        return None
    deepest = min(MAX_DEPTH, max((len(s) for s in burst.stacks), default=0))
    best: tuple[float, float, int] | None = None
    seen: set[int] = set()
    for depth in range(1, deepest + 1):
        ids = grid_ids(burst, depth)
        if len(ids) < MIN_SAMPLES:
            return None
        kinds = int(np.unique(ids).size)
        if kinds in seen and depth > 1 and kinds == int(np.unique(grid_ids(burst, depth - 1)).size):
            continue  # the same partition as one frame less: the same answer
        seen.add(kinds)
        found = _period_at_depth(similarity(ids, int(len(ids) / MIN_CYCLES)), MIN_SAMPLES_PER_PERIOD)
        if found is not None and (best is None or found[1] > best[1]):
            best = (found[0], found[1], depth)
    if best is None:
        return None
    period_s = best[0] / burst.rate_hz
    return StepPeriod(period_s, best[1], burst.seconds / period_s, best[2])
