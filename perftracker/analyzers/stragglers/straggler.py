"""Cross-rank stragglers: which rank makes the others wait at collectives, by how much, how often.

The last-arrival test and two durations tests (work between collectives, compute from ops) name a rank; its
finding says compute or communication, which ops, and in a laid-out job its place and victims (as evidence).
Views: `rank_metrics_view`, `lateness_view`, `rank_waits_view`, `judged_arrivals_view`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, median_step_s, preferred
from perftracker.analyzers.findings import Cost, Finding, Mark, Severity
from perftracker.analyzers.layout.views import P2P, parallel_layout_view
from perftracker.analyzers.pipeline.views import seat_of
from perftracker.analyzers.stragglers.clock_domains import clock_domain_findings
from perftracker.analyzers.stragglers.collectives import (  # noqa: F401 - re-exported for their readers
    CollectiveArrivals,
    arrivals_view,
    matching_findings,
)
from perftracker.analyzers.stragglers.late_rank import before_arrival, describe, measured_wait_finding
from perftracker.analyzers.stragglers.op_work import op_costs, slower_ops, trials_of
from perftracker.analyzers.stragglers.significance import (
    DurationVerdict,
    OutlierVerdict,
    judge_durations,
    judge_outliers,
    keyed_trials,
    work_trials,
)
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.analyzers.traces.per_rank import by_rank
from perftracker.evidence.common import Significance
from perftracker.evidence.steps import DurationsTest, StragglerEvidence
from perftracker.store import Store
from perftracker.values import short_symbol


def judged_arrivals_view(analysis: Analysis) -> pd.DataFrame:
    """The arrivals the straggler tests judge: every matched collective, but in a pipeline job (two or more
    stages) not its sends and receives: waiting in a receive is the schedule's bubble there, which the pipeline
    analyzer judges against the schedule's ideal (a slow worker still shows in its compute and at the
    data-parallel collectives)."""
    arr = analysis.view(arrivals_view).arrivals
    if arr.empty or analysis.view(parallel_layout_view).stages < 2:
        return arr
    return arr[~arr["collective"].astype(str).isin(P2P)]


def rank_metrics_view(analysis: Analysis) -> pd.DataFrame:
    """`rank_metrics` of the run's collective arrivals."""
    return rank_metrics(analysis.view(judged_arrivals_view), analysis.store)


def lateness_view(analysis: Analysis) -> pd.DataFrame:
    """Rank x step median lateness in ms, for the report's heatmap."""
    arr = analysis.view(arrivals_view).arrivals
    if arr.empty:
        return pd.DataFrame(columns=["rank", "step", "lateness_ms"])
    out = arr.groupby(["rank", "step"])["lateness_ns"].median().reset_index()
    out["lateness_ms"] = out.pop("lateness_ns") / 1e6
    return out.astype({"rank": np.int64, "step": np.int64})


def rank_waits_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank: share_last, wait_per_step_s (it waited for others), cost_per_step_s (others waited for it)."""
    metrics = analysis.view(rank_metrics_view)
    if metrics.empty:
        return pd.DataFrame(columns=["rank", "share_last", "wait_per_step_s", "cost_per_step_s"])
    return metrics[["share_last", "wait_per_step_s", "cost_per_step_s"]].reset_index()


def rank_metrics(arr: pd.DataFrame, store: Store) -> pd.DataFrame:
    """Per rank: instances, share last, median/p90 lateness, wait, cost per step (s) and share."""
    if arr.empty:
        return pd.DataFrame()
    steps = arr.loc[arr["step"] >= 0, "step"].nunique() or 1
    grouped = arr.groupby("rank")
    metrics = pd.DataFrame({
        "instances": grouped.size(),
        "share_last": grouped["is_last"].mean(),
        "median_lateness_s": grouped["lateness_ns"].median() / 1e9,
        "p90_lateness_s": grouped["lateness_ns"].quantile(0.9) / 1e9,
        "wait_per_step_s": grouped["wait_ns"].sum() / steps / 1e9,
        "cost_per_step_s": grouped["gap_to_next_ns"].sum() / steps / 1e9,
    })
    metrics["cost_share"] = _share_of_step(store, arr, metrics["cost_per_step_s"])
    # Persistence over steps: in how many steps was this rank last in most of its collectives?
    per_step = arr[arr["step"] >= 0].groupby(["step", "rank"])["is_last"].mean().unstack().fillna(0.0)
    metrics["steps_mostly_last"] = (metrics["share_last"] if per_step.empty else
                                    (per_step > 0.5).mean().reindex(metrics.index).fillna(0.0))
    metrics["world"] = arr["rank"].nunique()
    return metrics


def _step_seconds(store: Store, arr: pd.DataFrame) -> float:
    if not store.steps.empty:
        return median_step_s(preferred(store.steps, "profiler"))
    return float((arr["end_aligned"].max() - arr["start_aligned"].min()) / 1e9)


def _share_of_step(store: Store, arr: pd.DataFrame, seconds: Any) -> Any:
    """`seconds` (per step) as a share of the step time (0 without one)."""
    step_s = _step_seconds(store, arr)
    return seconds / step_s if step_s > 0 else 0.0


def _severity(share: float) -> Severity:
    """Critical from straggler.critical_cost_share of the step, warning from straggler.min_cost_share."""
    return (Severity.CRITICAL if share >= threshold("straggler.critical_cost_share") else
            Severity.WARNING if share >= threshold("straggler.min_cost_share") else Severity.INFO)


def _persistent(metrics: pd.DataFrame) -> pd.DataFrame:
    world = int(metrics["world"].iloc[0]) if not metrics.empty else 0
    min_last = threshold("straggler.min_share_last_two") if world <= 2 else threshold("straggler.min_share_last_many")
    return metrics[(metrics["instances"] >= threshold_int("straggler.min_instances")) & (metrics["share_last"] >= min_last)
                   & (metrics["cost_share"] >= threshold("straggler.min_cost_share"))]


def _kind(arr: pd.DataFrame, rank: int) -> tuple[str, StragglerEvidence]:
    """compute: its work before the collective is longer; communication: its transfer is slower."""
    frame = arr.sort_values(["rank", "start_aligned"])
    prev_end = frame.groupby("rank")["end_aligned"].shift(1)
    frame = frame.assign(work_before=frame["start_aligned"] - prev_end,
                         transfer=frame["end_aligned"] - frame["start_aligned"] - frame["wait_ns"])
    per_rank = frame.groupby("rank")[["work_before", "transfer"]].median()
    mine, peers = per_rank.loc[rank], per_rank.drop(index=rank).median()
    extra_work = float(mine["work_before"] - peers["work_before"]) / 1e9
    extra_transfer = float(mine["transfer"] - peers["transfer"]) / 1e9
    kind = "communication" if extra_transfer > max(extra_work, 0.0) and extra_transfer > 0 else "compute"
    return kind, StragglerEvidence(extra_work_before_collective_ms=round(extra_work * 1e3, 3),
                                   extra_transfer_ms=round(extra_transfer * 1e3, 3))


_ADVICE = {
    "compute": ("Rank {r} does its work before the collectives more slowly than its peers. Check that host: GPU "
                "clocks, thermals and power capping (nvidia-smi -q -d PERFORMANCE), CPU contention from other "
                "processes, and data loading or uneven batches on this rank; the ops that take longer on it are "
                "in the evidence."),
    "communication": ("Rank {r}'s collective transfers are slower than its peers'. Check its NIC and links: port "
                      "counters (errors, congestion, link speed), NCCL_IB_HCA / NCCL_SOCKET_IFNAME on that host, "
                      "and whether it fell back to a slower transport (see its NCCL log)."),
}


def verdict_view(analysis: Analysis) -> OutlierVerdict:
    """Is one rank (or a group) later than this run's own noise explains? (`significance.judge_outliers`) One trial
    per (process group, step), in time order: each member's own lateness summed over that step's collectives of
    the group (ns). The collectives of one step are correlated, so they are one trial, not many. Collectives
    outside any profiled step are one trial each."""
    arr = analysis.view(judged_arrivals_view)
    if arr.empty:
        return judge_outliers(pd.DataFrame(columns=["trial", "rank", "value"]))
    key = arr["pg"].astype(str) + ":" + arr["step"].astype(str)
    key = key.where(arr["step"] >= 0, "instance:" + arr["instance"].astype(str))
    return judge_outliers(keyed_trials(arr, key, "own_ns"))


def durations_view(analysis: Analysis) -> DurationVerdict:
    """Is one rank's own work (wall clock between collectives) longer than its peers', paired per step?
    (`significance.judge_durations`)"""
    # each durations test's family-wise level: straggler.alpha halved beside the last-arrival test, halved again
    # between the two durations tests (wall-clock work, op compute)
    return judge_durations(work_trials(analysis.view(judged_arrivals_view)), alpha=threshold("straggler.alpha") / 4)


def compute_view(analysis: Analysis) -> DurationVerdict:
    """Is one rank's compute (its compute kernels, or its CPU ops at their own cost: `op_work`) more than its
    peers', paired per step? (`significance.judge_durations`)"""
    costs = by_rank(analysis.store, lambda _, ev: op_costs(ev))
    return judge_durations(trials_of(costs), alpha=threshold("straggler.alpha") / 4, measure="compute",
                           min_excess=threshold("straggler.compute_min_excess"))


def _by_durations(v: OutlierVerdict, d: DurationVerdict) -> OutlierVerdict:
    """The last-arrival verdict, naming the rank the durations test names when it alone is significant."""
    if v.significant or not d.significant or d.rank is None or d.rank not in v.per_rank:
        return v
    return replace(v, ranks=(d.rank,), significant=True, confidence=1.0 - d.p_family, effect=d.mean_excess_ns)


def _durations_evidence(d: DurationVerdict) -> DurationsTest:
    return {"test": f"{d.measure} paired per step (one-sided t, autocorrelation-aware, x ranks)", "steps": d.steps,
            "p_family": round(d.p_family, 6), "excess_ms_per_step": round(d.mean_excess_ns / 1e6, 3),
            "excess_pct": round(100 * d.relative_excess, 1), "steps_longer": d.positive_steps,
            "lag1_autocorrelation": round(d.rho, 3), "effective_steps": round(d.n_eff, 2)}


def _significance(v: OutlierVerdict) -> Significance:
    named = v.per_rank.get(v.ranks[0] if v.ranks else (v.suspect if v.suspect is not None else -1))
    return {"trials": v.trials, "world": v.world, "confidence": round(v.confidence, 4),
            "times_slowest": named.times_slowest if named else 0,
            "chance_times_slowest": round(v.trials / max(v.world, 1), 2),
            "effect_ms": round(v.effect / 1e6, 3), "others_spread_ms": round(v.spread / 1e6, 3),
            "alpha": threshold("straggler.alpha")}


def _judged(store: Store, verdict: OutlierVerdict, ranks: tuple[int, ...], **finding: Any) -> Finding:
    """A straggler finding the outlier verdict backs: its ranks, their hosts, the verdict's confidence."""
    return Finding(analyzer="straggler", ranks=ranks, hosts=hosts_of(store, list(ranks)),
                   confidence=verdict.confidence, **finding)


def analyze_stragglers(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    seen = analysis.view(arrivals_view)
    arr, offsets = analysis.view(judged_arrivals_view), seen.offsets
    if arr.empty:
        return []
    metrics = analysis.view(rank_metrics_view)
    tests = (analysis.view(compute_view), analysis.view(durations_view))
    durations = next((d for d in tests if d.significant), tests[0])  # the first significant: op compute first
    by_last = analysis.view(verdict_view)
    verdict = _by_durations(by_last, durations)
    findings = [_alignment_finding(arr, offsets), *clock_domain_findings(seen.domains), *matching_findings(seen)]
    if verdict.significant and not verdict.is_group:
        findings.append(_straggler(analysis, arr, metrics, verdict, durations, by_last.significant))
    elif verdict.is_group:
        findings.append(_group(store, arr, verdict))
    elif verdict.trials < threshold_int("straggler.min_trials"):  # a step or so: a measurement of who was waited for, not a verdict
        cost = float(metrics["cost_per_step_s"].max())
        measured = measured_wait_finding(analysis, _step_seconds(store, arr), cost)
        if measured is not None and analysis.view(parallel_layout_view).stages > 1:  # its waits hold the bubbles
            measured = replace(measured, severity=Severity.INFO)
        findings += [measured] if measured is not None else []
    else:
        findings += _within_noise(store, metrics, verdict)
    named = {f.ranks[0] for f in findings if f.severity > Severity.INFO and len(f.ranks) == 1}
    return findings + [f for f in _comm_stragglers(arr, store) if f.ranks[0] not in named]


def _straggler(analysis: Analysis, arr: pd.DataFrame, metrics: pd.DataFrame, verdict: OutlierVerdict,
               durations: DurationVerdict, by_last: bool) -> Finding:
    """The straggler finding; `by_last`: the last-arrival test named it (else a durations test alone did)."""
    store = analysis.store
    r = verdict.ranks[0]
    row = metrics.loc[r].to_dict()
    kind, kind_evidence = _kind(arr, r)
    ops = slower_ops(analysis, r)
    severity = _severity(row["cost_share"])
    what = ("; slower ops: " + ", ".join(f"{short_symbol(o['name'], 60)} (+{o['extra_ms_per_step']:.2f} ms per step)"
                                         for o in ops[:3])) if ops else ""
    stats = verdict.per_rank[r]
    by_work = durations.significant and durations.rank == r
    did = before_arrival(analysis, r)
    severity = max(severity, Severity.WARNING) if by_work else severity  # its own work is 8%+ longer, step after step
    seat = seat_of(analysis, r)
    severity = Severity.INFO if seat.alone_at_stage else severity  # its stage's work: the pipeline finding judges it
    cheap = "" if severity > Severity.INFO else " (real, but it costs the others little)"
    last = (f"the last to arrive in {stats.times_slowest} of {stats.trials} steps ({stats.trials / verdict.world:.1f} "
            f"expected by chance), median {fmt_ms(row['median_lateness_s'])} late")
    if by_work and durations.measure == "compute":  # more compute, from its ops: a compute straggler
        kind = "compute"
    more = f"its {durations.measure} is {100 * durations.relative_excess:.0f}% more than its peers'"
    lead = (last if not by_work else f"{last}; {more} (more in {durations.positive_steps} of {durations.steps} steps)"
            if by_last else f"{more} in {durations.positive_steps} of {durations.steps} steps; {last}")
    return _judged(
        store, verdict, (r,), severity=severity,
        title=(f"Rank {r}{seat.where} is a persistent {kind} straggler: {lead}; the others wait "
               f"{fmt_ms(row['cost_per_step_s'])} per step for it{seat.victims_clause()}{what}{cheap}"),
        recommendation=_ADVICE[kind].format(r=r) + (f" What it did: {describe(did)}." if did else ""),
        evidence=StragglerEvidence({
            "kind": kind, "share_last": round(float(row["share_last"]), 3),
            "steps_mostly_last": round(float(row["steps_mostly_last"]), 3),
            "median_lateness_ms": round(float(row["median_lateness_s"]) * 1e3, 3),
            "p90_lateness_ms": round(float(row["p90_lateness_s"]) * 1e3, 3),
            "matched_collectives": int(row["instances"]), **kind_evidence,
            "slower_ops": ops[:8],
            "peers_median_lateness_ms": round(float(metrics.drop(index=r)["median_lateness_s"].median()) * 1e3, 3),
            "waiting_ranks": [int(x) for x in metrics.index if int(x) != r][:256],
            **seat.evidence(),
            "significance": _significance(verdict),
            **({"durations_test": _durations_evidence(durations)} if by_work else {}), "before_arrival": did,
        }),
        cost=Cost(float(row["cost_per_step_s"]), float(row["cost_share"])), key=Mark.STRAGGLER_RANK.key(r),
    )


def _group_cost(store: Store, arr: pd.DataFrame, members: set[int]) -> tuple[float, float]:
    """Per step, how long the other ranks waited for the group: its last arrival minus theirs (s, share)."""
    inside = arr["rank"].isin(list(members))
    last_in = arr[inside].groupby("instance")["start_aligned"].max()
    last_out = arr[~inside].groupby("instance")["start_aligned"].max()
    gap = (last_in - last_out).dropna().clip(lower=0)
    per_step = float(gap.sum()) / (arr.loc[arr["step"] >= 0, "step"].nunique() or 1) / 1e9
    return per_step, _share_of_step(store, arr, per_step)


def _group(store: Store, arr: pd.DataFrame, verdict: OutlierVerdict) -> Finding:
    members = set(verdict.ranks)
    hosts = hosts_of(store, sorted(members))
    ranks_of_host = {int(r) for r in arr["rank"].unique() if hosts and store.host_of(int(r)) == hosts[0]}
    whole_host = len(hosts) == 1 and ranks_of_host == members and len(hosts_of(store, sorted(
        int(r) for r in arr["rank"].unique()))) > 1
    cost, share = _group_cost(store, arr, members)
    listed = ", ".join(str(r) for r in sorted(members))
    times = sum(verdict.per_rank[r].times_slowest for r in members)
    if whole_host:
        severity = _severity(share)
        title = (f"Host {hosts[0]} is slow: its ranks {listed} arrive late together (the last in {times} of "
                 f"{verdict.trials} steps); the other hosts wait {fmt_ms(cost)} per step for it")
        advice = (f"Every rank of host {hosts[0]} is late, so look at the host, not one rank: CPU frequency and "
                  "contention, its GPUs' clocks and thermals, its NICs and their link, the data loading on it.")
    else:
        severity = Severity.INFO
        title = (f"Ranks {listed} are slower together (the last in {times} of {verdict.trials} steps, "
                 f"{fmt_ms(verdict.effect / 1e9)} later than the others): not a single straggler; they likely "
                 "share cores or another resource")
        advice = ("Ranks that are slow together usually share something: CPU cores (check the ranks' CPU "
                  "affinity and the number of processes per core), a NUMA node, a GPU or a NIC. Give each rank "
                  "its own cores (torchrun --local-ranks-filter / numactl / taskset) and compare again.")
    return _judged(
        store, verdict, tuple(sorted(members)), severity=severity, title=title, recommendation=advice,
        evidence=StragglerEvidence({"group": sorted(members), "whole_host": whole_host, "waiting_ranks": sorted(
            int(r) for r in arr["rank"].unique() if int(r) not in members)[:256], "significance": _significance(verdict)}),
        cost=Cost(cost, share), key=f"straggler:group:{listed}",
    )


def _within_noise(store: Store, metrics: pd.DataFrame, verdict: OutlierVerdict) -> list[Finding]:
    """The rank the old rule would have blamed, as an info with the numbers that keep it within noise."""
    if verdict.suspect is None or verdict.suspect not in _persistent(metrics).index:
        return []
    r = verdict.suspect
    row = metrics.loc[r].to_dict()
    others = float(metrics.drop(index=r)["median_lateness_s"].median())
    return [_judged(
        store, verdict, (r,), severity=Severity.INFO,
        title=(f"Rank {r} arrives last most often ({verdict.per_rank[r].times_slowest} of {verdict.trials} steps), "
               f"median {fmt_ms(row['median_lateness_s'])} late against {fmt_ms(others)} for the others: within "
               "this run's noise; profile more steps to tell"),
        recommendation=("Not a straggler by this run's evidence: " + verdict.reason + ". Profile more steps "
                        "(torch.profiler schedule active=20 or more) to tell a persistent straggler from noise."),
        evidence=StragglerEvidence(significance=_significance(verdict), share_last=round(float(row["share_last"]), 3),
                                   cost_share_if_real=round(float(row["cost_share"]), 4)),
        key=f"straggler:noise:{r}",
    )]


def comm_excess(arr: pd.DataFrame) -> pd.DataFrame:
    """Per rank: how much longer the transfer phase (all arrived -> done) of its collectives is than that of
    like collectives (same op and size) elsewhere. A slow NIC or link stretches every group the rank is in;
    ranks sharing only some groups with it are stretched less. Needs more than one group to be told apart."""
    arr = arr[~arr["p2p"]] if "p2p" in arr else arr  # a pair's send and recv do not end together: no transfer phase
    if arr.empty or arr["pg"].nunique() < 2:
        return pd.DataFrame()
    inst = arr.groupby("instance").agg(end=("end_aligned", "median"), last_start=("start_aligned", "max"),
                                       collective=("collective", "first"), size=("bytes", "max"))
    inst["transfer"] = (inst["end"] - inst["last_start"]).clip(lower=0)
    typical = inst.groupby(["collective", "size"])["transfer"].transform("median")
    inst["excess"] = inst["transfer"] - typical
    inst["typical"] = typical
    per = arr[["rank", "instance", "step"]].join(inst[["excess", "typical"]], on="instance")
    steps = per.loc[per["step"] >= 0, "step"].nunique() or 1
    out = per.groupby("rank").agg(excess_median=("excess", "median"), typical=("typical", "median"),
                                  excess_total=("excess", "sum"))
    out["excess_per_step_s"] = out["excess_total"].clip(lower=0) / steps / 1e9
    return out


def _comm_stragglers(arr: pd.DataFrame, store: Store) -> list[Finding]:
    """The rank whose collectives' transfers are longer than like ones without it, well ahead of the next."""
    table = comm_excess(arr)
    if table.empty or len(table) < 3:
        return []
    ordered = table.sort_values("excess_median", ascending=False)
    top, runner_up = ordered.iloc[0], ordered.iloc[1]
    if top["typical"] <= 0 or top["excess_median"] < threshold("straggler.comm_excess_ratio") * top["typical"]:
        return []
    if top["excess_median"] < threshold("straggler.comm_runner_up") * max(float(runner_up["excess_median"]), 0.0):
        return []
    r, cost = int(str(ordered.index[0])), float(top["excess_per_step_s"])
    share = _share_of_step(store, arr, cost)
    if share < threshold("straggler.comm_min_cost_share"):
        return []
    excess, typical = round(float(top["excess_median"]) / 1e6, 3), round(float(top["typical"]) / 1e6, 3)
    return [Finding(
        analyzer="straggler", severity=max(_severity(share), Severity.WARNING),
        title=(f"Rank {r} is a communication straggler: collectives it takes part in transfer {excess:.2f} ms longer "
               f"than like collectives without it (typical {typical:.2f} ms); {fmt_ms(cost)} per step"),
        recommendation=_ADVICE["communication"].format(r=r),
        evidence=StragglerEvidence(kind="communication", transfer_excess_ms=excess, typical_transfer_ms=typical,
                                   next_rank_excess_ms=round(float(runner_up["excess_median"]) / 1e6, 3)),
        ranks=(r,), hosts=hosts_of(store, [r]), cost=Cost(cost, share), key=f"straggler:comm:{r}", confidence=0.0,
    )]


def _alignment_finding(arr: pd.DataFrame, offsets: pd.Series) -> Finding:
    skew = int(offsets.max() - offsets.min()) if len(offsets) else 0
    sources = sorted(arr["source"].unique())
    return Finding(
        analyzer="straggler", severity=Severity.INFO,
        title=(f"Matched {arr['instance'].nunique()} collectives across {arr['rank'].nunique()} ranks "
               f"({', '.join(sources)}); estimated clock skew {fmt_ms(skew / 1e9)}"),
        recommendation="Context: straggler metrics use clocks aligned on collective completion times.",
        evidence=StragglerEvidence(matched_collectives=int(arr["instance"].nunique()), skew_ns=skew,
                                   offsets_ns={str(r): int(v) for r, v in offsets.head(256).items()}, sources=sources),
        ranks=tuple(int(r) for r in sorted(arr["rank"].unique())), key="straggler:alignment",
    )
