"""Stragglers from NCCL Inspector's per-rank collective timings: the rank the others wait for, without a profiler."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, rank_list, step_seconds
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.stragglers.significance import OutlierVerdict, judge_outliers
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.network import NcclStragglerEvidence
from perftracker.store import Store


def inspector_collectives_view(analysis: Analysis) -> pd.DataFrame:
    """The collective rows of `nccl_collectives` (p2p ops have no common end to compare against),
    one per (communicator, sequence number, rank), with `dur_s`."""
    table = analysis.store["nccl_collectives"]
    if table.empty:
        return pd.DataFrame(columns=["comm_id", "comm_name", "comm_size", "op", "bytes", "seq", "rank", "host",
                                     "dur_s", "busbw_gbs", "dump_ns"])
    coll = table[(table["kind"] == "coll") & (table["rank"] >= 0)]
    frame = pd.DataFrame({"comm_id": coll["comm_id"].astype(str), "comm_name": coll["comm_name"].astype(str),
                          "comm_size": coll["comm_size"], "op": coll["op"].astype(str), "bytes": coll["bytes"],
                          "seq": coll["seq"], "rank": coll["rank"], "host": coll["host"].astype(str),
                          "dur_s": coll["dur_ns"] / 1e9, "busbw_gbs": coll["busbw_gbs"], "dump_ns": coll["dump_ns"]})
    return frame.drop_duplicates(["comm_id", "seq", "rank"]).reset_index(drop=True)


def _lateness(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of (communicator, seq) pairs with at least two members, each with `lateness_s`: the members'
    median exec time minus its own."""
    grouped = frame.groupby(["comm_id", "seq"])["dur_s"]
    out = frame[grouped.transform("count") >= 2].copy()
    out["lateness_s"] = out.groupby(["comm_id", "seq"])["dur_s"].transform("median") - out["dur_s"]
    return out


def inspector_lateness_table(analysis: Analysis) -> pd.DataFrame:
    """Each row with its lateness (s): computed once, shared by the analyzer and the report's table."""
    frame = analysis.view(inspector_collectives_view)
    return _lateness(frame) if not frame.empty else frame.assign(lateness_s=pd.Series(dtype=float))


def inspector_lateness_view(analysis: Analysis) -> pd.DataFrame:
    """Per (communicator, rank): median lateness (ms), collectives, host; latest ranks first."""
    late = analysis.view(inspector_lateness_table)
    if late.empty:
        return pd.DataFrame(columns=["comm_id", "comm_name", "comm_size", "rank", "host", "collectives",
                                     "median_lateness_ms", "median_exec_ms"])
    table = late.groupby(["comm_id", "rank"]).agg(
        comm_name=("comm_name", "first"), comm_size=("comm_size", "max"), host=("host", "first"),
        collectives=("seq", "nunique"), median_lateness_ms=("lateness_s", "median"),
        median_exec_ms=("dur_s", "median")).reset_index()
    table[["median_lateness_ms", "median_exec_ms"]] = (table[["median_lateness_ms", "median_exec_ms"]] * 1e3).round(4)
    return table.sort_values(["comm_id", "median_lateness_ms"], ascending=[True, False]).reset_index(drop=True)


def _trials(late: pd.DataFrame) -> pd.DataFrame:
    """trial, rank, value (median lateness in the block) for one communicator's collectives."""
    seqs = np.sort(late["seq"].unique())
    blocks = min(threshold_int("nccl.timing.max_trials"), len(seqs))
    block_of = pd.Series(np.arange(len(seqs)) * blocks // max(len(seqs), 1), index=seqs)
    trial = late["seq"].map(block_of)
    return (late.assign(trial=trial).groupby(["trial", "rank"])["lateness_s"].median()
            .rename("value").reset_index())


def analyze_inspector_stragglers(analysis: Analysis) -> list[Finding]:
    late = analysis.view(inspector_lateness_table)
    if late.empty:
        return []
    comms = [c for c, part in late.groupby("comm_id") if part["rank"].nunique() >= 2]
    verdicts: dict[tuple[int, ...], list[tuple[str, pd.DataFrame, OutlierVerdict]]] = {}
    for comm in comms:
        part = late[late["comm_id"] == comm]
        verdict = judge_outliers(_trials(part), min_effect=threshold("nccl.timing.min_lateness_s"),
                                 alpha=threshold("straggler.alpha") / len(comms))
        if verdict.significant:
            verdicts.setdefault(tuple(int(r) for r in verdict.ranks), []).append((str(comm), part, verdict))
    return [_finding(analysis.store, ranks, named) for ranks, named in sorted(verdicts.items())]


def _finding(store: Store, ranks: tuple[int, ...], named: list[tuple[str, pd.DataFrame, OutlierVerdict]]) -> Finding:
    comm, part, verdict = max(named, key=lambda item: item[2].effect)
    rank = ranks[0]
    name = str(part["comm_name"].iloc[0])
    members = sorted(int(r) for r in part["rank"].unique())
    hosts = tuple(sorted({str(h) for h in part.loc[part["rank"].isin(ranks), "host"] if str(h)}))
    ops = ", ".join(sorted(set(part["op"]))[:4])
    window_s = max(float(part["dump_ns"].max() - part["dump_ns"].min()) / 1e9, 0.0)
    n_seq = int(part["seq"].nunique())
    period_s = window_s / (n_seq - 1) if n_seq > 1 and window_s > 0 else 0.0
    share = min(verdict.effect / period_s, 1.0) if period_s > 0 else 0.0
    steps = step_seconds(store)
    per_step = share * float(steps.median()) if share and not steps.empty else verdict.effect
    stats = verdict.per_rank.get(rank)
    group = verdict.is_group
    who = f"Ranks {rank_list(list(ranks))} arrive" if group else f"Rank {rank} arrives"
    evidence: NcclStragglerEvidence = {
        "source": "NCCL Inspector (per-rank collective kernel times)",
        "communicator": {"id": comm, "name": name, "size": int(part["comm_size"].max()), "ops": ops},
        "communicators_naming_it": [{"id": c, "name": str(p["comm_name"].iloc[0]),
                                     "lateness_ms": round(v.effect * 1e3, 4)} for c, p, v in named],
        "lateness_ms_per_collective": round(verdict.effect * 1e3, 4),
        "others_spread_ms": round(verdict.spread * 1e3, 4),
        "collectives": n_seq, "trials": verdict.trials, "members": members[:64],
        "times_last": stats.times_slowest if stats else 0,
        "window_s": round(window_s, 3), "wait_share_of_time": round(share, 4),
        "cost_basis": "share of the run's step time" if share and not steps.empty else "wait per collective",
        "method": "lateness = the members' median exec time minus the rank's own, per collective; "
                  "blocks of consecutive collectives are the trials of the cross-rank significance test",
    }
    title = (f"{who} last at NCCL collectives: the other ranks of communicator {name} ({ops}) wait "
             f"{fmt_ms(verdict.effect)} per collective for {'them' if group else 'it'} (NCCL Inspector)")
    advice = ("The named rank reaches the collective later than its peers, so the others' kernels wait for it: "
              "look at what it does before the collective (its own compute, data loading, CPU contention or "
              "throttling on its host: `perftracker attach` with stacks or a profiler trace of a few steps of "
              "every rank shows where its time goes).")
    return Finding(analyzer="nccl_straggler",
                   severity=Severity.CRITICAL if share >= threshold("nccl.timing.critical_share") else Severity.WARNING,
                   title=title, recommendation=advice, evidence=evidence,
                   ranks=ranks, hosts=hosts, confidence=verdict.confidence,
                   cost=Cost(per_step, share), key=f"nccl_straggler:{','.join(map(str, ranks))}")
