"""Unstable step time: which steps are slow, and whether one phase of the step explains them.

`jitter_finding(store, stats)`: a warning only when one phase of the rank's own work carries the slow steps' extra
time, else an info (the machine's or the job's variation as a whole).
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.common import hosts_of
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.stragglers.waiting import is_waiting_phase
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.store import Store


def jitter_finding(store: Store, stats: pd.DataFrame) -> Finding | None:
    """See docs/internals/stepgraph.md. `stats`: the per-rank step statistics (steps.step_stats)."""
    bad = stats[(stats["steps"] >= threshold_int("jitter.min_steps")) & (stats["p90_s"] > threshold("jitter.ratio") * stats["median_s"])]
    if bad.empty:
        return None
    ranks = [int(r) for r in bad["rank"]]
    ratio = float((bad["p90_s"] / bad["median_s"]).median())
    excess = float((bad["mean_s"] - bad["median_s"]).clip(lower=0).median())
    evidence: dict[str, object] = {
        "per_rank": {int(r["rank"]): {"median_ms": round(r["median_s"] * 1e3, 3), "p90_ms": round(r["p90_s"] * 1e3, 3),
                                      "max_ms": round(r["max_s"] * 1e3, 3)} for _, r in bad.head(64).iterrows()}}
    phase, shares = _phase_of_slow_steps(store, ranks)
    evidence["slow_step_extra_by_phase"] = shares
    title = f"Unstable step time: p90 is {ratio:.1f}x the median on {len(ranks)} rank(s)"
    cost = Cost(excess, excess / float(bad["mean_s"].median()))
    if phase is not None:
        return Finding(
            analyzer="steps", severity=Severity.WARNING,
            title=f"{title}; the slow steps are slow in '{phase}' ({100 * shares[phase]:.0f}% of their extra time)",
            recommendation=(f"The '{phase}' phase stalls in some steps. For 'data': more DataLoader workers, "
                            "pin_memory, prefetching, faster storage; otherwise look at what that phase does in "
                            "the slow steps (the step-time chart shows which)."),
            evidence=evidence, ranks=tuple(ranks), hosts=hosts_of(store, ranks), cost=cost, key="steps:jitter",
        )
    top = max(shares, key=lambda p: shares[p]) if shares else ""
    if top and is_waiting_phase(top) and shares[top] >= threshold("jitter.phase_share"):
        why = (f"the slow steps are slow in '{top}', which includes waiting for the other ranks (the gradient "
               "all-reduce), so the step files cannot tell whose work was slow")
    elif shares:
        why = "the slow steps are slower in every phase"
    else:
        why = "there are no phase timings to tell which part of the step is slow"
    return Finding(
        analyzer="steps", severity=Severity.INFO,
        title=f"{title}; {why}: variation of the machine or the whole job, not a cause in one phase",
        recommendation=("If this is a shared or busy machine, this is its noise. Otherwise look for periodic work "
                        "(checkpointing, evaluation, garbage collection, logging) in the step-time chart, and "
                        "write step files with phase timings (the perftracker step hook) to tell which part "
                        "of the step stalls."),
        evidence=evidence, ranks=tuple(ranks), hosts=hosts_of(store, ranks), cost=cost, key="steps:jitter",
    )


def _phase_of_slow_steps(store: Store, ranks: list[int]) -> tuple[str | None, dict[str, float]]:
    """The phase carrying PHASE_SHARE of the slow steps' extra time (and being a smaller share of a
    normal step), with every phase's share of that extra time."""
    phases = store.tables["phases"]
    steps = store.steps
    steps = steps[steps["rank"].isin(ranks)]
    if phases.empty or steps.empty:
        return None, {}
    per_step = phases[phases["rank"].isin(ranks)].pivot_table(
        index=["rank", "step"], columns="phase", values="dur_ns", aggfunc="sum", observed=True).fillna(0.0)
    if per_step.empty:
        return None, {}
    durations = steps.groupby(["rank", "step"])["dur_ns"].max()
    medians = durations.groupby(level="rank").transform("median")
    slow = durations[durations > threshold("jitter.slow_step_ratio") * medians].index
    normal = durations[durations <= medians].index
    slow, normal = per_step.index.intersection(slow), per_step.index.intersection(normal)
    if len(slow) == 0 or len(normal) == 0:
        return None, {}
    extra = (per_step.loc[slow] - per_step.loc[normal].median()).clip(lower=0).sum()
    total = float(extra.sum())
    if total <= 0:
        return None, {}
    shares = {str(p): round(float(v) / total, 3) for p, v in extra.items()}
    top = max(shares, key=lambda p: shares[p])
    normal_share = float(per_step.loc[normal].median()[top]) / max(float(per_step.loc[normal].median().sum()), 1e-9)
    named = shares[top] >= threshold("jitter.phase_share") and normal_share < shares[top] and not is_waiting_phase(top)
    return (top if named else None), shares
