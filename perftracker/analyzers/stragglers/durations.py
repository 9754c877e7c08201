"""Is one rank's own work longer than its peers', step after step? The durations-based straggler test.

`work_trials(arrivals)`: each rank's work before the collectives of each step; `judge_durations(trials)`: a
paired one-sided t test per rank on the effective number of steps, corrected for the number of ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.thresholds import threshold, threshold_int


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
    key = frame["pg"].astype(str) + ":" + frame["step"].astype(str)
    out = frame.assign(key=key).groupby(["key", "rank"])["work"].sum().reset_index(name="value")
    order = {k: i for i, k in enumerate(frame.assign(key=key).groupby("key")["start_aligned"].min().sort_values().index)}
    out["trial"] = out["key"].map(order)
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


def _paired_excess(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each cell minus the median of the other cells of its row, that median), for steps x ranks."""
    others = np.stack([np.median(np.delete(values, j, axis=1), axis=1) for j in range(values.shape[1])], axis=1)
    return values - others, others


def judge_durations(trials: pd.DataFrame, alpha: float | None = None, measure: str = "own work",
                    min_excess: float | None = None) -> DurationVerdict:
    """`trials`: columns trial, rank, value (a rank's own work in one step). See docs/internals/stepgraph.md.
    `alpha`: the family-wise level (default half of straggler.alpha: beside the last-arrival test, the two
    together keep the run's). `measure` names what the values are, for the verdict's words; `min_excess` the
smallest relative excess named (default straggler.durations_min_excess)."""
    floor = threshold("straggler.durations_min_excess") if min_excess is None else min_excess
    alpha = threshold("straggler.alpha") / 2 if alpha is None else alpha
    grid = trials.pivot_table(index="trial", columns="rank", values="value", aggfunc="sum").sort_index().dropna()
    steps, world = grid.shape
    if world < 3 or steps < threshold_int("straggler.durations_min_steps"):
        return DurationVerdict(None, False, 1.0, steps, world, 0.0, 0.0, 0, 0.0, float(steps),
                               f"{steps} step(s) of {world} rank(s): too few for the durations test", measure)
    values = grid.to_numpy(dtype=float)
    d, others = _paired_excess(values)
    rho = _pooled_rho(d)
    n_eff = max(2.0, steps * (1.0 - rho) / (1.0 + rho))
    means = d.mean(axis=0)
    best = int(np.argmax(means))
    rank = int(str(grid.columns[best]))
    sd = float(d[:, best].std(ddof=1))
    t = math.inf if sd == 0 else float(means[best]) / (sd / math.sqrt(n_eff))
    p_family = min(1.0, t_sf(t, n_eff - 1.0) * world) if means[best] > 0 else 1.0
    peers_work = float(np.median(others[:, best]))
    relative = float(means[best]) / peers_work if peers_work > 0 else 0.0
    rest = _paired_excess(np.delete(values, best, axis=1))[0].mean(axis=0)  # the others among themselves
    spread = float(np.percentile(rest, 90) - np.percentile(rest, 10)) if len(rest) >= 5 else float(rest.max() - rest.min())
    verdict = DurationVerdict(rank, False, p_family, steps, world, float(means[best]), relative,
                              int((d[:, best] > 0).sum()), rho, n_eff, measure=measure)
    why = _why_not(verdict, float(rest.max()), spread, alpha, floor)
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
