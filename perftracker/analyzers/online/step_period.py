"""The iteration period of a training loop from one rank's short sampled-stack recording, for jobs that offer no
other step signal (no hook, no step lines, no NCCL Inspector output).

`estimate_period(burst)` returns the `StepPeriod` of a `StackBurst` (the main thread's stacks in time order,
as `py-spy record --format chrometrace` gives them), or None when the burst shows no clear period.
"""

from __future__ import annotations

import math

import numpy as np

from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.store.stack_frames import StackBurst, StepPeriod

MAX_DEPTH = 24
MAX_DEPTHS_TRIED = 10  # distinct cuts of the stacks (deeper cuts that change nothing are skipped)
COARSE_STEPS_PER_PEAK = 3  # frequency grid: 1 / (3 T), then refined around the peak
FINE_STEPS = 41


def entries(burst: StackBurst, depth: int) -> dict[tuple[str, ...], np.ndarray]:
    """For each stack cut to `depth` frames, the times (s) the sampler entered it."""
    found: dict[tuple[str, ...], list[float]] = {}
    previous: tuple[str, ...] | None = None
    for at, stack in zip(burst.change_s, burst.stacks):
        cut = stack[:depth]
        if cut and cut != previous:
            found.setdefault(cut, []).append(at)
        previous = cut
    least = threshold_int("online.period.min_entries")
    return {cut: np.asarray(times) for cut, times in found.items() if len(times) >= least}


def rayleigh(times: list[np.ndarray], freqs: np.ndarray) -> np.ndarray:
    """Z(f), pooled over the stacks' entry times (docs/internals/analyzers.md)."""
    z = np.zeros(len(freqs))
    for t in times:
        phasors = np.exp(2j * np.pi * np.outer(freqs, t)).sum(axis=1)
        z += np.abs(phasors) ** 2 / len(t)
    return z


def _fundamental(z: np.ndarray, n: int) -> int | None:
    """Index of the lowest-frequency local peak within HARMONIC_SHARE of the highest that is itself a period (Z and
    coherence above their floors), else of the highest."""
    top = float(z.max()) if len(z) else 0.0
    if top <= 0:
        return None
    floor = max(threshold("online.period.harmonic_share") * top, threshold("online.period.min_z"),
                threshold("online.period.min_confidence") ** 2 * n)
    for i in range(len(z)):
        left = z[i - 1] if i > 0 else -np.inf
        right = z[i + 1] if i + 1 < len(z) else -np.inf
        if z[i] >= floor and z[i] >= left and z[i] >= right:
            return i
    return int(np.argmax(z))


def chance(z: float, stacks: int) -> float:
    """P(Z >= z) at one frequency fixed in advance when the entries have no period: each stack adds an Exp(1)
    (|sum of n_s unit phasors|^2 / n_s), so the pooled Z is Gamma(stacks, 1)."""
    term = total = 1.0
    for i in range(1, stacks):
        term *= z / i
        total += term
    return min(1.0, math.exp(-z) * total)


def _refined(times: list[np.ndarray], f: float, step: float, f_lo: float, f_hi: float) -> tuple[float, float]:
    """(frequency, Z) of the highest Z within `step` of `f` (clipped to the range)."""
    fine = np.linspace(max(f_lo, f - step), min(f_hi, f + step), FINE_STEPS)
    zf = rayleigh(times, fine)
    j = int(np.argmax(zf))
    return float(fine[j]), float(zf[j])


def _at_depth(burst: StackBurst, found: dict[tuple[str, ...], np.ndarray], f_lo: float,
              f_hi: float) -> tuple[float, float, float] | None:
    """(frequency, coherence, Z of the peak that shows a period) of one depth's entries, or None."""
    times = list(found.values())
    n = sum(len(t) for t in times)
    if n == 0 or f_hi <= f_lo:
        return None
    span = burst.seconds
    step = 1.0 / (COARSE_STEPS_PER_PEAK * span)
    coarse = np.arange(f_lo, f_hi, step)
    z = rayleigh(times, coarse)
    i = _fundamental(z, n)
    if i is None:
        return None
    f, zf = _refined(times, float(coarse[i]), step, f_lo, f_hi)
    # The sub-harmonic f/2: entries that recur every 1/f alternate phase there and cancel (Z at chance), so a
    # strong Z at f/2 says the period is 2/f and f its harmonic. f/2 is one frequency fixed in advance, so it is
    # judged by its own chance, not by MIN_Z (which pays for the few hundred frequencies scanned): on loaded
    # machines a real loop's Z at 1/P fell just under MIN_Z while the one at 2/P passed.
    if f / 2 >= f_lo:
        half, zh = _refined(times, f / 2, COARSE_STEPS_PER_PEAK * step, f_lo, f_hi)  # within a peak's width
        if (zh >= threshold("online.period.min_confidence") ** 2 * n
                and chance(zh, len(times)) <= threshold("online.period.subharmonic_chance")):
            return half, float(np.sqrt(zh / n)), zf
    return f, float(np.sqrt(zf / n)), zf


def estimate_period(burst: StackBurst) -> StepPeriod | None:
    """The iteration period of one burst, or None (docs/internals/analyzers.md)."""
    span = burst.seconds
    if len(burst.change_s) < 2 * threshold_int("online.period.min_entries") or burst.rate_hz <= 0 or span <= 0:
        return None
    f_lo, f_hi = threshold("online.period.min_cycles") / span, burst.rate_hz / threshold_int("online.period.min_samples_per_period")
    deepest = min(MAX_DEPTH, max((len(s) for s in burst.stacks), default=0))
    best: tuple[float, float, float, int] | None = None
    tried: list[int] = []
    previous: list[int] | None = None
    for depth in range(1, deepest + 1):
        found = entries(burst, depth)
        shape = sorted(len(t) for t in found.values())
        if shape == previous:
            continue  # the same entries as one frame less (almost always the same partition): the same answer
        previous = shape
        tried.append(depth)
        if len(tried) > MAX_DEPTHS_TRIED:
            break
        got = _at_depth(burst, found, f_lo, f_hi)
        if (got is not None and got[2] >= threshold("online.period.min_z")
                and got[1] >= threshold("online.period.min_confidence") and (best is None or got[1] > best[1])):
            best = (got[0], got[1], got[2], depth)
    if best is None:
        return None
    period_s = 1.0 / best[0]
    return StepPeriod(period_s, best[1], span / period_s, best[3])
