"""The iteration period of a training loop from one rank's short sampled-stack recording, for jobs that offer no
other step signal (no hook, no step lines, no NCCL Inspector output).

Promise: `estimate_period(burst)` returns the `StepPeriod` of a `StackBurst` (the main thread's stacks in time
order, as `py-spy record --format chrometrace` gives them), or None when the burst shows no clear period: the
thread sat in one stack (idle, hung), the stacks do not repeat, or the period is longer than a third of the burst.

How (judged on real recordings, tests/fixtures/stack_bursts): a training loop enters the same stacks once per
iteration, so the times at which the sampler first sees a stack (its *entries*) recur with the iteration period.
At each depth d (the stacks cut to their first d frames from the root: "where in the loop" rather than which leaf
line ran), the entry times t_j of every stack s are put through the Rayleigh periodogram
Z(f) = sum over s of |sum_j exp(2 pi i f t_j)|^2 / n_s (pooled over the stacks, each with its own phase): a stack
entered once per iteration adds n_s at f = 1/P, a random one about 1. Sampling misses (an iteration whose short
work fell between two samples, common at 50-100 Hz) leave an entry out but do not shift the others' phases, which
is why entries' phases, not the intervals between them or the exact match of stacks lag by lag (tried first:
a 95 ms loop whose work is 10 ms matched itself at its period in only 10% of the samples), are used. Frequencies
m/P repeat as well; the period is the lowest-frequency peak within `HARMONIC_SHARE` of the highest (and itself
above the floors below), refined on a fine grid around it. The depth with the highest coherence wins; the coherence sqrt(Z / n) (0..1: 1 when every
entry falls at the same phase) is the confidence; below `MIN_CONFIDENCE`, or with Z under `MIN_Z` (chance, over
the frequencies scanned), there is no period.

Limits, at rate r and burst length T: periods from `MIN_SAMPLES_PER_PERIOD` / r (60 ms at 50 Hz, 30 ms at 100 Hz)
to T / `MIN_CYCLES` (1.25 s for a 5 s burst); on the real recordings (~100 ms steps, 4 s at 100 Hz) within 1% of
the job's own mean step time, 15% on a loaded machine; live (2 s at 100 Hz), 24 of 26 rank-bursts within 6%. It gives the loop's dominant period: a loop locked to an outside clock (a SIGSTOP duty cycle whose period is
close to the step's, letting one or two iterations through per cycle) shows the clock's period, not the mean
step (measured: 104 ms for a 128 ms mean under a 100 ms duty cycle), and a rank frozen by SIGSTOP most of each
period can show half its period (2 of 26 live rank-bursts); a loop whose iterations differ by a lot
(gradient accumulation, evaluation inside the burst) shows its repeating unit's. One whose main thread sits in a
single stack the whole burst (idle, hung, or all work in other threads) has no period here.
"""

from __future__ import annotations

import numpy as np

from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.store.stack_bursts import StackBurst, StepPeriod

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
    """Z(f), pooled over the stacks' entry times (see the module docstring)."""
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


def _at_depth(burst: StackBurst, found: dict[tuple[str, ...], np.ndarray], f_lo: float,
              f_hi: float) -> tuple[float, float, float] | None:
    """(frequency, coherence, Z) of one depth's entries, or None."""
    times = list(found.values())
    n = sum(len(t) for t in times)
    if n == 0 or f_hi <= f_lo:
        return None
    span = burst.seconds
    coarse = np.arange(f_lo, f_hi, 1.0 / (COARSE_STEPS_PER_PEAK * span))
    z = rayleigh(times, coarse)
    i = _fundamental(z, n)
    if i is None:
        return None
    step = 1.0 / (COARSE_STEPS_PER_PEAK * span)
    fine = np.linspace(max(f_lo, coarse[i] - step), min(f_hi, coarse[i] + step), FINE_STEPS)
    zf = rayleigh(times, fine)
    j = int(np.argmax(zf))
    return float(fine[j]), float(np.sqrt(zf[j] / n)), float(zf[j])


def estimate_period(burst: StackBurst) -> StepPeriod | None:
    """The iteration period of one burst, or None (see the module docstring)."""
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
