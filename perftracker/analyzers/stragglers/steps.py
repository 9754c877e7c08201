"""Step time per rank (median, p90, spread), unstable steps, and ranks slow in one phase.

Views: `step_stats_view` (per-rank statistics) and `step_series_view` (every step of every rank); `jitter_finding`
warns only when one phase of the rank's own work carries the slow steps' extra time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, preferred
from perftracker.analyzers.findings import Cost, Finding, Mark, Severity
from perftracker.analyzers.stragglers.significance import judge_outliers
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.steps import StepsEvidence
from perftracker.store import Store


def step_stats(store: Store) -> pd.DataFrame:
    """Per rank: steps, median, p90, min, max step time in seconds (step files preferred)."""
    steps = store.steps
    if steps.empty:
        return pd.DataFrame()
    use = preferred(steps, "stepfile")
    grouped = use.groupby("rank")["dur_ns"]
    stats = pd.DataFrame({
        "steps": grouped.size(), "median_s": grouped.median() / 1e9, "p90_s": grouped.quantile(0.9) / 1e9,
        "min_s": grouped.min() / 1e9, "max_s": grouped.max() / 1e9, "mean_s": grouped.mean() / 1e9,
    }).reset_index()
    stats["source"] = "stepfile" if (use["source"] == "stepfile").any() else "profiler"
    return stats


def step_stats_view(analysis: Analysis) -> pd.DataFrame:
    """`step_stats` of the run."""
    return step_stats(analysis.store)


STEP_SERIES_COLUMNS = ["rank", "window", "step", "start_ns", "dur_ns", "source"]


def step_series_view(analysis: Analysis) -> pd.DataFrame:
    """Every step: rank, window, step, start_ns, dur_ns, source (profiler | stepfile)."""
    return analysis.store.steps[STEP_SERIES_COLUMNS].copy()


def analyze_steps(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    stats = analysis.view(step_stats_view)
    if stats.empty:
        return []
    jitter = jitter_finding(store, stats)
    return [_summary(store, stats), *_imbalance(store, stats), *([jitter] if jitter is not None else []),
            *_phases(store, stats)]


def _summary(store: Store, stats: pd.DataFrame) -> Finding:
    med = float(stats["median_s"].median())
    spread = float(stats["median_s"].max() - stats["median_s"].min())
    return Finding(
        analyzer="steps", severity=Severity.INFO,
        title=(f"Step time {fmt_ms(med)} (median over {len(stats)} ranks); spread across ranks {fmt_ms(spread)}"
               if len(stats) > 1 else f"Step time {fmt_ms(med)} (median of rank {int(stats['rank'].iloc[0])})"),
        recommendation="Context for the other findings; the per-rank chart is in the report.",
        evidence=StepsEvidence(per_rank={str(int(r["rank"])): {
            "steps": int(r["steps"]), "median_ms": round(r["median_s"] * 1e3, 3), "p90_ms": round(r["p90_s"] * 1e3, 3)}
            for _, r in stats.head(256).iterrows()}, source=str(stats["source"].iloc[0])),
        ranks=tuple(int(r) for r in stats["rank"]), key="steps:summary",
    )


def _imbalance(store: Store, stats: pd.DataFrame) -> list[Finding]:
    """A rank whose steps take IMBALANCE longer than the others' (possible with step files, where a rank's
    step ends before it waits for the next one): a warning only when the significance test names it."""
    if len(stats) < 2:
        return []
    use = preferred(store.steps, "stepfile")
    verdict = judge_outliers(pd.DataFrame({"trial": use["step"], "rank": use["rank"], "value": use["dur_ns"]}))
    out = []
    for _, row in stats.iterrows():
        others = stats[stats["rank"] != row["rank"]]["median_s"].median()
        if others > 0 and row["steps"] >= threshold_int("steps.min_steps") and row["median_s"] > others * (1 + threshold("steps.imbalance")):
            rank = int(row["rank"])
            lost = float(row["median_s"] - others)
            real = verdict.significant and verdict.ranks == (rank,)
            mine = verdict.per_rank.get(rank)
            confidence = verdict.confidence if real else (1.0 - mine.p_family if mine else 0.0)
            out.append(Finding(
                analyzer="steps", severity=Severity.WARNING if real else Severity.INFO,
                title=f"Rank {rank} steps take {fmt_ms(row['median_s'])}, {100 * lost / others:.0f}% longer than "
                      f"the other ranks ({fmt_ms(others)})" + ("" if real else "; within this run's noise"),
                recommendation=("In synchronous training this rank holds the others back: check its host (GPU "
                                "clocks and thermals, CPU contention, data loading on that rank).") if real else
                               f"Not a straggler by this run's evidence: {verdict.reason or 'other ranks are as slow'}.",
                evidence=StepsEvidence(rank_median_ms=round(row["median_s"] * 1e3, 3), others_median_ms=round(
                    others * 1e3, 3), significance={"trials": verdict.trials, "confidence": round(confidence, 4)}),
                ranks=(rank,), hosts=hosts_of(store, [rank]), confidence=confidence,
                cost=Cost(lost, lost / float(row["median_s"])), key=f"steps:imbalance:{rank}",
            ))
    return out


def _phases(store: Store, stats: pd.DataFrame) -> list[Finding]:
    phases = store.tables["phases"]
    if phases.empty or phases["rank"].nunique() < 2:
        return []
    med = phases.groupby(["phase", "rank"], observed=True)["dur_ns"].median().reset_index()
    out = []
    step_med = stats.set_index("rank")["median_s"]
    n_phases = max(int(med["phase"].nunique()), 1)
    own = phases[~phases["phase"].astype(str).map(is_waiting_phase)]
    own_work = own.groupby(["rank", "step"])["dur_ns"].sum().groupby(level="rank").median()
    for phase, group in med.groupby("phase", observed=True):
        mine = phases[phases["phase"] == phase]
        verdict = judge_outliers(pd.DataFrame({"trial": mine["step"], "rank": mine["rank"], "value": mine["dur_ns"]}),
                                 alpha=threshold("straggler.alpha") / n_phases)  # one test per phase: keep the family-wise rate
        dur, ranks = group["dur_ns"].to_numpy(), group["rank"].to_numpy()  # arrays: no frame filtered per row
        for (_, row), others in zip(group.iterrows(), (dur[ranks != r] for r in ranks)):
            peers = np.median(others) if len(others) else np.nan  # as Series.median
            if peers <= 0 or row["dur_ns"] <= peers * (1 + threshold("steps.phase_imbalance")):
                continue
            rank = int(row["rank"])
            extra = float(row["dur_ns"] - peers) / 1e9
            step = float(step_med.get(rank, 0.0))
            if step > 0 and extra / step < threshold("steps.min_phase_cost_share"):
                continue
            waits = is_waiting_phase(str(phase)) and rank in own_work.index and len(own_work) > 1 and \
                float(own_work[rank]) <= float(own_work.drop(rank).median())
            real = verdict.significant and verdict.ranks == (rank,) and not waits
            stats_r = verdict.per_rank.get(rank)
            times = f"the slowest in {stats_r.times_slowest} of {stats_r.trials} steps" if stats_r else ""
            if waits:
                times = ("its own work is no slower than its peers', so the extra time is waiting for them "
                         "in the gradient all-reduce")
            out.append(Finding(
                analyzer="steps", severity=Severity.WARNING if real else Severity.INFO,
                title=f"Rank {rank} spends {fmt_ms(row['dur_ns'] / 1e9)} in '{phase}' per step, "
                      f"{row['dur_ns'] / peers:.1f}x its peers ({fmt_ms(peers / 1e9)})"
                      + ("" if real else f"; not a straggler: {times}" if waits else
                         f"; within this run's noise ({times}): record more steps to tell"),
                recommendation=(f"This rank does more '{phase}' work or runs it slower: compare its inputs "
                                "(sequence lengths, batch composition), its host (CPU contention, GPU clocks) and "
                                "its data loading with the other ranks.") if real else
                               (f"Not a straggler by this run's evidence: {times if waits else verdict.reason or 'others are as slow'}."),
                evidence=StepsEvidence(phase=str(phase), rank_median_ms=round(float(row["dur_ns"]) / 1e6, 3),
                                       peers_median_ms=round(float(peers) / 1e6, 3), significance={
                                           "trials": verdict.trials, "confidence": round(verdict.confidence, 4),
                                           "times_slowest": stats_r.times_slowest if stats_r else 0,
                                           "alpha": round(threshold("straggler.alpha") / n_phases, 5)}),
                ranks=(rank,), hosts=hosts_of(store, [rank]), confidence=verdict.confidence,
                cost=Cost(extra, extra / step if step > 0 else 0.0), key=Mark.STEPS_PHASE.key(phase, rank),
            ))
    return out


# Step-file phases that include waiting for the other ranks (DDP's gradient all-reduce runs inside `backward`):
# a rank slower there may be the one that waits, so no straggler is named from them alone.
WAITING_PHASES = ("backward", "wait", "allreduce", "comm")


def is_waiting_phase(name: str) -> bool:
    return name.strip().lower() in WAITING_PHASES


def jitter_finding(store: Store, stats: pd.DataFrame) -> Finding | None:
    """See docs/internals/stepgraph.md. `stats`: the per-rank step statistics (steps.step_stats)."""
    bad = stats[(stats["steps"] >= threshold_int("jitter.min_steps")) & (stats["p90_s"] > threshold("jitter.ratio") * stats["median_s"])]
    if bad.empty:
        return None
    ranks = [int(r) for r in bad["rank"]]
    ratio = float((bad["p90_s"] / bad["median_s"]).median())
    excess = float((bad["mean_s"] - bad["median_s"]).clip(lower=0).median())
    evidence: StepsEvidence = {
        "per_rank": {str(int(r["rank"])): {"median_ms": round(r["median_s"] * 1e3, 3), "p90_ms": round(r["p90_s"] * 1e3, 3),
                                      "max_ms": round(r["max_s"] * 1e3, 3)} for _, r in bad.head(64).iterrows()}}
    phase, shares = _phase_of_slow_steps(store, ranks)
    evidence["slow_step_extra_by_phase"] = shares
    title = f"Unstable step time: p90 is {ratio:.1f}x the median on {len(ranks)} rank(s)"
    cost = Cost(excess, excess / float(bad["mean_s"].median()))
    top = max(shares, key=lambda p: shares[p]) if shares else ""
    if phase is not None:
        why = f"the slow steps are slow in '{phase}' ({100 * shares[phase]:.0f}% of their extra time)"
        advice = (f"The '{phase}' phase stalls in some steps. For 'data': more DataLoader workers, pin_memory, "
                  "prefetching, faster storage; otherwise look at what that phase does in the slow steps (the "
                  "step-time chart shows which).")
    else:
        advice = ("If this is a shared or busy machine, this is its noise. Otherwise look for periodic work "
                  "(checkpointing, evaluation, garbage collection, logging) in the step-time chart, and write step "
                  "files with phase timings (the perftracker step hook) to tell which part of the step stalls.")
        if top and is_waiting_phase(top) and shares[top] >= threshold("jitter.phase_share"):
            why = (f"the slow steps are slow in '{top}', which includes waiting for the other ranks (the gradient "
                   "all-reduce), so the step files cannot tell whose work was slow")
        elif shares:
            why = "the slow steps are slower in every phase"
        else:
            why = "there are no phase timings to tell which part of the step is slow"
        why += ": variation of the machine or the whole job, not a cause in one phase"
    return Finding(
        analyzer="steps", severity=Severity.WARNING if phase is not None else Severity.INFO, title=f"{title}; {why}",
        recommendation=advice, evidence=evidence, ranks=tuple(ranks), hosts=hosts_of(store, ranks), cost=cost,
        key="steps:jitter",
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
