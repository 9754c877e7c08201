"""Is one rank (or one group of ranks) really slower than the others, beyond this run's own noise?

`judge_outliers(trials)`: one trial per step; the binomial chance of being the slowest so often, corrected for the
number of ranks, and the effect above the other ranks' spread; or a group. `judge_durations(trials)`: a paired
one-sided t test per rank of its own work (`work_trials`) on the effective number of steps. Plain statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perftracker.analyzers.thresholds import default, threshold, threshold_int

ALPHA = default("straggler.alpha")  # docs/reference/thresholds.md


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exactly (to float precision; summed in logs, so any n)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0 or p >= 1.0:
        return 1.0 if p >= 1.0 else 0.0
    # in logs: math.comb(n, i) as a float overflows past n ~ 1,030 (a long run's steps as trials)
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    terms = [log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q for i in range(k, n + 1)]
    top = max(terms)
    return float(min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms)))


@dataclass(frozen=True)
class RankStats:
    """One rank's numbers over the trials: how often it was the slowest and by how much it is slower."""

    rank: int
    trials: int
    times_slowest: int
    share_slowest: float
    typical_excess: float  # median over trials of (its value - median of the others), caller's unit
    p_family: float  # chance that a clean run shows some rank this often the slowest


@dataclass(frozen=True)
class OutlierVerdict:
    """What the trials support: one straggler, a group slow together, or nothing beyond noise."""

    ranks: tuple[int, ...]  # the straggler (one rank) or the group; empty when nothing is significant
    significant: bool
    confidence: float
    trials: int
    world: int
    effect: float  # the named rank's (or group's) typical excess over the others
    spread: float  # the spread of the others' typical excesses (the run's own noise)
    per_rank: dict[int, RankStats] = field(default_factory=dict)
    suspect: int | None = None  # the slowest rank even when nothing is significant (for an info)
    reason: str = ""  # why it is not significant, for people

    @property
    def is_group(self) -> bool:
        return self.significant and len(self.ranks) > 1


def _median_of_others(values: np.ndarray) -> np.ndarray:
    """For each cell, the median of the other values of its row (rows without NaN), vectorized."""
    n = values.shape[1]
    order = np.argsort(values, axis=1, kind="stable")
    ranked = np.take_along_axis(values, order, axis=1)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(n)[None, :].repeat(len(values), axis=0), axis=1)

    def remaining(i: int) -> np.ndarray:  # the i-th smallest of the row once the cell itself is removed
        return np.where(position > i, ranked[:, [i]], ranked[:, [min(i + 1, n - 1)]])

    m = n - 1
    return remaining(m // 2) if m % 2 else (remaining(m // 2 - 1) + remaining(m // 2)) / 2.0


def _typical_excess(grid: pd.DataFrame) -> pd.Series:
    """Per rank: median over trials of its value minus the median of the other ranks in that trial."""
    values = grid.to_numpy(dtype=float)
    full = ~np.isnan(values).any(axis=1)
    excess = np.full(values.shape, np.nan)
    if full.any():
        excess[full] = values[full] - _median_of_others(values[full])
    for row in np.flatnonzero(~full):  # trials some rank missed: one by one
        for j in range(values.shape[1]):
            others = np.delete(values[row], j)
            if not np.isnan(values[row, j]) and (~np.isnan(others)).any():
                excess[row, j] = values[row, j] - np.nanmedian(others)
    with np.errstate(all="ignore"):
        return pd.Series(np.nanmedian(excess, axis=0), index=grid.columns)


def _both_halves(slowest: pd.Series, ranks: set[int], share: float) -> bool:
    """The ranks are the slowest more often than `share` in each half of the trials (in trial order)."""
    half = len(slowest) // 2
    for part in (slowest.iloc[:half], slowest.iloc[half:]):
        if part.empty or float(part.isin(ranks).mean()) <= share:
            return False
    return True


def judge_outliers(trials: pd.DataFrame, min_effect: float = 0.0, alpha: float | None = None) -> OutlierVerdict:
    """`trials`: columns trial, rank, value (larger = slower). See docs/internals/stepgraph.md. `alpha` is the
    family-wise false-alarm chance (divide ALPHA by the number of tests when a caller makes several; the run's
    `straggler.alpha` unless given)."""
    alpha = threshold("straggler.alpha") if alpha is None else alpha
    grid = trials.groupby(["trial", "rank"])["value"].max().dropna().unstack("rank")  # pivot_table's, ~3x cheaper
    grid = grid.dropna(axis=0, thresh=2)
    world = int(grid.shape[1])
    if world < 2 or len(grid) < threshold_int("straggler.min_trials"):
        return OutlierVerdict((), False, 0.0, len(grid), world, 0.0, 0.0,
                              reason=f"{len(grid)} trial(s) of {world} rank(s): too few to judge")
    slowest = grid.idxmax(axis=1, skipna=True)  # per trial, the rank with the largest value (ties: the lowest)
    excess = _typical_excess(grid)
    values = grid.to_numpy(dtype=float)
    present = ~np.isnan(values)
    members = present.sum(axis=1)
    column = {rank: j for j, rank in enumerate(grid.columns)}
    times = np.bincount(slowest.map(column).to_numpy(dtype=int), minlength=world)
    per_rank: dict[int, RankStats] = {}
    for rank, j in column.items():
        t = int(present[:, j].sum())
        k = int(times[j])
        peers = int(np.median(members[present[:, j]])) if t else world
        p = binomial_tail(k, t, 1.0 / max(peers, 2)) * world
        per_rank[int(rank)] = RankStats(int(rank), t, k, k / t if t else 0.0, float(excess[rank]), min(1.0, p))
    suspect = max(per_rank.values(), key=lambda s: (s.typical_excess, s.share_slowest)).rank
    single = _single(per_rank, slowest, world, min_effect, alpha)
    if single is not None:
        return OutlierVerdict((single.rank,), True, 1.0 - single.p_family, len(grid), world, single.typical_excess,
                              _spread(per_rank, {single.rank}), per_rank, single.rank)
    group = _group(per_rank, slowest, world, len(grid), min_effect, alpha)
    if group is not None:
        return group
    s = per_rank[suspect]
    why = (f"rank {suspect} was the slowest in {s.times_slowest} of {s.trials} trials (chance alone: "
           f"{s.trials / world:.1f}); that is within this run's noise")
    return OutlierVerdict((), False, 1.0 - s.p_family, len(grid), world, s.typical_excess,
                          _spread(per_rank, {suspect}), per_rank, suspect, why)


def _spread(per_rank: dict[int, RankStats], named: set[int]) -> float:
    """How far apart the other ranks' typical excesses are: their full range with few ranks, the range of
    their middle 80% from five ranks on (so one victim, e.g. a straggler's tensor-parallel partner that
    always waits for it, does not pass for noise); with one other rank there is no spread to measure."""
    return _range(np.array([s.typical_excess for r, s in per_rank.items() if r not in named], dtype=float))


def _range(values: np.ndarray) -> float:
    """The range of `values`, of their middle 80% from five values on; 0 for fewer than two."""
    if len(values) < 2:
        return 0.0
    low, high = np.percentile(values, [10, 90]) if len(values) >= 5 else (values.min(), values.max())
    return float(high - low)


def _single(per_rank: dict[int, RankStats], slowest: pd.Series, world: int, min_effect: float,
            alpha: float) -> RankStats | None:
    best = min(per_rank.values(), key=lambda s: (s.p_family, -s.typical_excess))
    if best.p_family > alpha or best.typical_excess <= max(min_effect, 0.0):
        return None
    if best.typical_excess < threshold("straggler.min_effect_over_spread") * _spread(per_rank, {best.rank}):
        return None
    runner_up = max((s.typical_excess for s in per_rank.values() if s.rank != best.rank), default=0.0)
    if runner_up > threshold("straggler.runner_up_share") * best.typical_excess:  # another rank is nearly as late: a group, not one
        return None
    if not _both_halves(slowest, {best.rank}, 1.0 / world):
        return None
    return best


def _group(per_rank: dict[int, RankStats], slowest: pd.Series, world: int, trials: int,
           min_effect: float, alpha: float) -> OutlierVerdict | None:
    if world < 3:
        return None
    ordered = sorted(per_rank.values(), key=lambda s: -s.typical_excess)
    gaps = [ordered[i].typical_excess - ordered[i + 1].typical_excess for i in range(len(ordered) - 1)]
    cut = int(np.argmax(gaps)) + 1  # ranks before the widest gap are the slow side
    slow, fast = ordered[:cut], ordered[cut:]
    if not 2 <= len(slow) < len(fast) + len(slow) or len(slow) > world // 2:
        return None
    inner = max(slow[0].typical_excess - slow[-1].typical_excess, fast[0].typical_excess - fast[-1].typical_excess)
    if gaps[cut - 1] < threshold("straggler.min_effect_over_spread") * inner or gaps[cut - 1] <= max(min_effect, 0.0):
        return None
    members = {s.rank for s in slow}
    k = int(slowest.isin(members).sum())
    share = len(members) / world
    p = min(1.0, binomial_tail(k, trials, share) * math.comb(world, len(members)))
    if p > alpha or not _both_halves(slowest, members, share):
        return None
    fast_level = float(np.median([s.typical_excess for s in fast]))
    effect = float(np.median([s.typical_excess for s in slow])) - fast_level
    return OutlierVerdict(tuple(sorted(members)), True, 1.0 - p, trials, world, effect, inner, per_rank,
                          slow[0].rank)


@dataclass(frozen=True)
class DurationVerdict:
    """The durations test's answer for the rank with the largest mean excess."""

    rank: int | None
    significant: bool
    p_family: float
    steps: int
    world: int
    mean_excess_ns: float  # its work minus the others' median, mean over steps
    relative_excess: float  # that over the others' median work
    positive_steps: int  # steps in which its work exceeded the others' median
    rho: float
    n_eff: float
    reason: str = ""
    measure: str = "own work"  # what the values are: "own work" (wall clock between collectives), "compute"


def work_trials(arr: pd.DataFrame) -> pd.DataFrame:
    """Per (trial, rank): own work before the collectives of one step of one process group (ns)."""
    if arr.empty:
        return pd.DataFrame(columns=["trial", "rank", "value"])
    frame = arr[arr["step"] >= 0].sort_values(["rank", "start_aligned"], kind="stable")
    prev_end = frame.groupby("rank")["end_aligned"].shift(1)
    work = (frame["start_aligned"] - prev_end).clip(lower=0)
    frame = frame.assign(work=work).dropna(subset=["work"])
    complete = frame.groupby("instance")["rank"].transform("size") == frame["members"]
    frame = frame[complete]
    return keyed_trials(frame, frame["pg"].astype(str) + ":" + frame["step"].astype(str), "work")


def keyed_trials(frame: pd.DataFrame, key: pd.Series, value: str) -> pd.DataFrame:
    """One trial per `key` (numbered in the order of its first start_aligned): each rank's `value` summed."""
    frame = frame.assign(key=key)
    order = frame.groupby("key")["start_aligned"].min().sort_values()
    out = frame.groupby(["key", "rank"])[value].sum().reset_index(name="value")
    out["trial"] = out["key"].map(pd.Series(np.arange(len(order)), index=order.index))
    return out[["trial", "rank", "value"]]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (any df > 0)."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def paired_p(mean: float, sd: float, n: float, tests: int) -> float:
    """Family-wise p (times `tests`) of a mean paired excess `mean`, standard deviation `sd`, over `n` (effective)
    samples: one-sided Student's t; 1 unless the mean is above 0."""
    t = math.inf if sd == 0 else mean / (sd / math.sqrt(n))
    return min(1.0, t_sf(t, n - 1.0) * tests) if mean > 0 else 1.0


def _pooled_rho(d: np.ndarray) -> float:
    """Lag-1 autocorrelation of the columns of `d` (steps x ranks), pooled over the ranks, clipped to
    [0, 0.9]; 0 unless it is above the one-sided 5% bound of white noise (1.645 / sqrt(pairs)): with a
    handful of steps an estimate is mostly noise, and a noisy rho would throw away most of the steps."""
    centered = d - d.mean(axis=0, keepdims=True)
    den = float((centered ** 2).sum())
    if den <= 0 or len(d) < 3:
        return 0.0
    rho = float((centered[1:] * centered[:-1]).sum() / den)
    pairs = (len(d) - 1) * d.shape[1]
    return float(np.clip(rho, 0.0, 0.9)) if rho > 1.645 / math.sqrt(pairs) else 0.0


def judge_durations(trials: pd.DataFrame, alpha: float | None = None, measure: str = "own work",
                    min_excess: float | None = None) -> DurationVerdict:
    """`trials`: columns trial, rank, value (a rank's own work in one step). See docs/internals/stepgraph.md.
    `alpha`: the family-wise level (default half of straggler.alpha: beside the last-arrival test, the two
    together keep the run's). `measure` names what the values are, for the verdict's words; `min_excess` the
smallest relative excess named (default straggler.durations_min_excess)."""
    floor = threshold("straggler.durations_min_excess") if min_excess is None else min_excess
    alpha = threshold("straggler.alpha") / 2 if alpha is None else alpha
    grid = trials.groupby(["trial", "rank"])["value"].sum().unstack("rank").dropna()  # a pivot_table, cheaper
    steps, world = grid.shape
    if world < 3 or steps < threshold_int("straggler.durations_min_steps"):
        return DurationVerdict(None, False, 1.0, steps, world, 0.0, 0.0, 0, 0.0, float(steps),
                               f"{steps} step(s) of {world} rank(s): too few for the durations test", measure)
    values = grid.to_numpy(dtype=float)
    others = _median_of_others(values)
    d = values - others  # each rank's excess over the median of the others, per step
    rho = _pooled_rho(d)
    n_eff = max(2.0, steps * (1.0 - rho) / (1.0 + rho))
    means = d.mean(axis=0)
    best = int(np.argmax(means))
    rank = int(str(grid.columns[best]))
    p_family = paired_p(float(means[best]), float(d[:, best].std(ddof=1)), n_eff, world)
    peers_work = float(np.median(others[:, best]))
    relative = float(means[best]) / peers_work if peers_work > 0 else 0.0
    rest_values = np.delete(values, best, axis=1)  # the others among themselves
    rest = (rest_values - _median_of_others(rest_values)).mean(axis=0)
    verdict = DurationVerdict(rank, False, p_family, steps, world, float(means[best]), relative,
                              int((d[:, best] > 0).sum()), rho, n_eff, measure=measure)
    why = _why_not(verdict, float(rest.max()), _range(rest), alpha, floor)
    return DurationVerdict(**{**verdict.__dict__, "significant": not why, "reason": why})


def _why_not(v: DurationVerdict, runner_up: float, spread: float, alpha: float, min_excess: float) -> str:
    if v.mean_excess_ns <= 0:
        return f"no rank's {v.measure} exceeds its peers'"
    if v.p_family > alpha:
        return f"rank {v.rank}'s {v.measure} exceeds its peers' by chance alone with p = {v.p_family:.3g} (family-wise)"
    if v.relative_excess < min_excess:
        return (f"rank {v.rank}'s excess is {100 * v.relative_excess:.1f}% of its peers' {v.measure}, under "
                f"{100 * min_excess:.0f}%")
    if v.mean_excess_ns < threshold("straggler.durations_min_effect_over_spread") * spread:
        return f"rank {v.rank}'s excess is within the spread between the other ranks"
    if runner_up > threshold("straggler.durations_runner_up_share") * v.mean_excess_ns:
        return "another rank's work is nearly as long: not a single straggler"
    return ""
