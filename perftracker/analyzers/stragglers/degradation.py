"""Step time over a run: periodic slow steps, and a sustained slowdown with the step where it began.

From step files alone: isolated spikes set aside (periodic work when they recur), then the one change point
(`change_point_of`), a warning only when `shift.judge_shift` finds it beyond the run's noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, preferred
from perftracker.analyzers.findings import Cost, Finding, Mark, Severity
from perftracker.analyzers.stragglers.shift import ShiftVerdict, judge_shift, median_sorted
from perftracker.analyzers.stragglers.steps import WAITING_PHASES
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.steps import DegradationEvidence
from perftracker.store import Store
from perftracker.values import robust_sigma


@dataclass(frozen=True)
class ChangePoint:
    step: int
    before_s: float
    after_s: float
    verdict: ShiftVerdict

    @property
    def rise(self) -> float:
        return self.after_s / self.before_s - 1.0 if self.before_s > 0 else 0.0


def job_series(steps: pd.DataFrame) -> pd.Series:
    """Median step duration (s) across ranks, indexed by step (step files preferred)."""
    use = preferred(steps, "stepfile")
    if use.empty:
        return pd.Series(dtype=float)
    return use.groupby("step")["dur_ns"].median().sort_index() / 1e9


def spikes(series: pd.Series) -> pd.Series:
    """Boolean mask of spike steps."""
    values = series.to_numpy()
    median = float(np.median(values))
    mad = robust_sigma(values, median) or 1e-12
    z = (values - median) / mad
    high = (z > threshold("degradation.spike_z")) & (values > threshold("degradation.spike_ratio") * median)
    # A spike stands alone: a slow step with slow neighbours is part of a sustained shift (which the change
    # point must see), not a one-off such as a checkpoint.
    k = threshold_int("degradation.spike_neighbours")
    padded = np.concatenate([np.zeros(k, bool), high, np.zeros(k, bool)])
    near = sum(padded[k + d:len(padded) - k + d].astype(int) for d in range(-k, k + 1) if d != 0)
    return pd.Series(high & (near <= 1), index=series.index)


def period_of(steps: np.ndarray) -> int | None:
    """The recurring interval of spike steps, or None when they are not periodic."""
    if len(steps) < 3:
        return None
    gaps = np.diff(np.sort(steps))
    values, counts = np.unique(gaps, return_counts=True)
    dominant = int(values[np.argmax(counts)])
    near = np.abs(gaps - dominant) <= 1
    return dominant if dominant >= 2 and near.mean() >= threshold("degradation.period_share") else None


def best_split(y: np.ndarray) -> tuple[int, int] | None:
    """(the split minimizing the squared error of a single shift in mean, the number of splits scanned), or None
    for fewer than MIN_STEPS values or none left between the margins; the first and last max(5, n/20) values
    are never a split."""
    n = len(y)
    if n < threshold_int("degradation.min_steps"):
        return None
    margin = max(5, n // 20)
    csum, csq = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(margin, n - margin)
    if not len(k):  # too few steps for a split inside the margins (min_steps may be set as low as 1)
        return None
    left_n, right_n = k, n - k
    left_sum, right_sum = csum[k - 1], csum[-1] - csum[k - 1]
    left_sq, right_sq = csq[k - 1], csq[-1] - csq[k - 1]
    sse = (left_sq - left_sum ** 2 / left_n) + (right_sq - right_sum ** 2 / right_n)
    return int(k[np.argmin(sse)]), len(k)


def change_point(series: pd.Series) -> ChangePoint | None:
    """`change_point_of` a Series of step durations (s) indexed by step."""
    return change_point_of(series.to_numpy(dtype=float), series.index.to_numpy())


def change_point_of(durations_s: np.ndarray, steps: np.ndarray) -> ChangePoint | None:
    """The one change-point detector (offline analyzers and the watcher's degradation rule alike): the most
    likely single shift in mean when it is a rise of RISE or more, with `shift.judge_shift`'s verdict. Plain
    numpy on small arrays (no pandas, each side sorted once), fast enough for the watcher's confirmations."""
    y = np.asarray(durations_s, dtype=float)
    split = best_split(y)
    if split is None:
        return None
    best, scanned = split
    before, after = y[:best], y[best:]
    b, a = median_sorted(np.sort(before)), median_sorted(np.sort(after))
    if b <= 0 or a / b - 1.0 < threshold("degradation.rise"):
        return None
    return ChangePoint(int(steps[best]), b, a, judge_shift(before, after, candidates=scanned))


def _culprit(store: Store, step: int) -> tuple[list[int], dict[str, float]]:
    """Ranks whose own work (phases, else step time) rose most after the change point."""
    phases = store.tables["phases"]
    if not phases.empty:
        work = phases[~phases["phase"].astype(str).isin(WAITING_PHASES)]
        per = work.groupby(["rank", "step"])["dur_ns"].sum().reset_index()
    else:
        per = store.steps[["rank", "step", "dur_ns"]]
    if per.empty or per["rank"].nunique() < 2:
        return [], {}
    after = per[per["step"] >= step].groupby("rank")["dur_ns"].median()
    before = per[per["step"] < step].groupby("rank")["dur_ns"].median()
    rise = ((after - before) / 1e9).dropna()
    if rise.empty:
        return [], {}
    others = rise.median()
    spread = float((rise - others).abs().median()) or 1e-9
    culprits = rise[(rise > 0) & (rise - others > max(threshold("degradation.culprit_over_spread") * spread,
                                                        threshold("degradation.culprit_share_of_max") * abs(float(rise.max()))))]
    if culprits.empty:
        culprits = _host_culprits(store, rise)
    return [int(r) for r in culprits.index], {str(r): round(float(v) * 1e3, 3) for r, v in rise.items()}


def _host_culprits(store: Store, rise: pd.Series) -> pd.Series:
    """The ranks of the one host all of whose ranks slowed while the other hosts' did not (a host-level
    slowdown: its ranks rise together, so no single one stands out from the median of all)."""
    hosts = {int(r): store.host_of(int(r)) for r in rise.index}
    names = {h for h in hosts.values() if h}
    if len(names) < 2 or not all(hosts.values()):
        return rise[:0]
    found = []
    for name in sorted(names):
        mine = rise[[hosts[int(r)] == name for r in rise.index]]
        rest = rise[[hosts[int(r)] != name for r in rise.index]]
        low, top = float(mine.min()), float(rest.max())
        if low > 0 and low > threshold("degradation.host_rise_over_others") * float(rest.abs().max()) and low - top >= 0.5 * float(mine.max()):
            found.append(mine)
    return found[0] if len(found) == 1 else rise[:0]


def analyze_degradation(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    series = job_series(store.steps)
    if len(series) < threshold_int("degradation.min_steps"):
        return []
    findings: list[Finding] = []
    mask = spikes(series)
    base = float(series[~mask].median())
    if mask.any():
        spike_steps = series.index[mask].to_numpy()
        period = period_of(spike_steps)
        extra = float((series[mask] - base).mean())
        if period is not None:
            findings.append(Finding(
                analyzer="degradation", severity=Severity.INFO,
                title=(f"Every {period} steps one step is slower by {fmt_ms(extra)} ({len(spike_steps)} times): "
                       "periodic work such as checkpointing, evaluation or garbage collection"),
                recommendation="Expected if it matches your checkpoint/eval interval; otherwise make it "
                "asynchronous (async checkpointing) or less frequent. Not counted as a slowdown.",
                evidence=DegradationEvidence(period_steps=period, spike_steps=[int(s) for s in spike_steps[:50]],
                                             extra_ms=round(extra * 1e3, 3), median_step_ms=round(base * 1e3, 3)),
                cost=Cost(extra / period, extra / period / base if base > 0 else 0.0), key="degradation:periodic",
            ))
    cp = change_point(series[~mask])
    if cp is not None:
        findings.append(_change_finding(store, cp))
    return findings


def _change_finding(store: Store, cp: ChangePoint) -> Finding:
    ranks, rise_by_rank = _culprit(store, cp.step)
    one_log = set(store.steps["rank"].astype(int)) == {-1}  # step times of the job from one log: no rank known
    where = (f" on rank {', '.join(map(str, ranks))}" if ranks else
             " for the job as a whole, from one log's step times (no rank)" if one_log else " on all ranks at once")
    hosts = hosts_of(store, ranks) if ranks else hosts_of(store, sorted(int(r) for r in store.steps["rank"].unique()))
    whole = bool(ranks) and len(hosts) == 1 and len(ranks) > 1 and set(ranks) == {
        int(r) for r in store.steps["rank"].unique() if store.host_of(int(r)) == hosts[0]}
    if whole:  # every rank of one host and of no other: a host-level slowdown is named as the host
        where = f" on host {hosts[0]} (ranks {', '.join(map(str, ranks))})"
    elif hosts and (ranks or len(hosts) == 1):
        where += f" (host {', '.join(hosts)})"
    verdict = cp.verdict
    evidence: DegradationEvidence = {"change_step": cp.step, "before_ms": round(cp.before_s * 1e3, 3),
                "after_ms": round(cp.after_s * 1e3, 3), "rise_by_rank_ms": rise_by_rank,
                "significance": {"p_corrected": round(verdict.p_corrected, 5), "sustained": verdict.sustained,
                                 "step_autocorrelation": round(verdict.autocorrelation, 3),
                                 "confidence": round(verdict.confidence, 4)}}
    title = (f"Slower since step {cp.step}{where}: step time {fmt_ms(cp.before_s)} -> {fmt_ms(cp.after_s)} "
             f"(+{100 * cp.rise:.0f}%)")
    severity = Severity.WARNING if cp.rise < threshold("degradation.critical_rise") else Severity.CRITICAL
    cost = Cost(cp.after_s - cp.before_s, (cp.after_s - cp.before_s) / cp.after_s)
    if not verdict.significant:
        title, severity, cost = f"{title}; within this run's noise", Severity.INFO, Cost()
        advice = f"Not a slowdown by this run's evidence: {verdict.reason}."
    elif ranks:
        advice = ("Something changed at that step on the named rank: on its host check GPU clocks and thermals, "
                  "CPU contention and memory pressure, other jobs started on the node, and NIC errors.")
    else:
        advice = ("Every rank slowed at once, so the cause is shared: other processes or jobs started on the node(s) "
                  "(CPU contention, memory pressure), GPU clocks and thermals across the node, a data change "
                  "(longer sequences), or a growing Python-side structure (lists of tensors, logging).")
    return Finding(analyzer="degradation", severity=severity, title=title, recommendation=advice, evidence=evidence,
                   ranks=tuple(ranks), hosts=hosts, confidence=verdict.confidence, cost=cost,
                   key=Mark.DEGRADATION_CHANGE.key())
