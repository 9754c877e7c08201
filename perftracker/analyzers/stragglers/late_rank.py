"""The rank the others wait for, what it did before its late arrivals, and the one-step measurement.

`waited_for(table)` ranks the ranks by the waiting they caused; `before_arrival(analysis, rank)` compares what it
ran before its late arrivals with the median member; `measured_wait_finding` is the one-step measurement.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of
from perftracker.analyzers.findings import Cost, Finding, Mark, Severity
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view, step_waits
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.intervals import clipped_total
from perftracker.evidence.steps import BeforeArrival, StragglerEvidence
from perftracker.values import short_symbol

MAX_INTERVALS = 16
_GPU = ("compute", "memcpy", "memset")
_CPU = ("cpu_op", "annotation", "runtime")
CAUSES = {"data_loader": re.compile(r"dataloader|_next_data|wait_for_batch", re.IGNORECASE),
          "host_sync": re.compile(r"Synchronize|aten::item|_local_scalar_dense", re.IGNORECASE),
          "memcpy": re.compile(r"memcpy", re.IGNORECASE)}


def waited_for(table: pd.DataFrame) -> pd.DataFrame:
    """Per rank (rows of `wait_transfer.split`): caused_ns (the others' waiting it caused), times_last, waited_ns
    (its own waiting), steps; most waiting caused first."""
    per = step_waits(table)
    if per.empty:
        return pd.DataFrame(columns=["caused_ns", "times_last", "waited_ns", "steps"])
    out = per.groupby("rank").agg(caused_ns=("caused_ns", "sum"), times_last=("times_last", "sum"),
                                  waited_ns=("wait_ns", "sum"), steps=("step", "nunique"))
    return out.sort_values(["caused_ns", "times_last"], ascending=False, kind="stable")


def _intervals(analysis: Analysis, table: pd.DataFrame, rank: int) -> list[tuple[int, int, int, int, int, int]]:
    """(rank, lo, hi, median member, its lo, its hi) per costly instance, on aligned clocks."""
    frame = table.assign(end=table["arrival_ns"] + table["dur_ns"]).sort_values(["rank", "arrival_ns"])
    frame["prev_end"] = frame.groupby("rank")["end"].shift(1)
    offsets = analysis.view(_offsets)
    steps = analysis.store.steps
    starts = steps[steps["source"] == "profiler"].groupby(["rank", "step"])["start_ns"].min() if not steps.empty else None

    def lo_of(row: pd.Series) -> int:
        lo = float(row["prev_end"]) if pd.notna(row["prev_end"]) else -np.inf
        if starts is not None and (int(row["rank"]), int(row["step"])) in starts.index:
            lo = max(lo, float(starts[(int(row["rank"]), int(row["step"]))]) - offsets.get(int(row["rank"]), 0))
        # never after the arrival: a previous collective still running then (async ones overlap) bounds nothing
        return min(int(lo), int(row["arrival_ns"])) if np.isfinite(lo) else int(row["arrival_ns"])

    caused = frame[frame["last_rank"] == rank].groupby("instance")["wait_ns"].sum().sort_values(ascending=False)
    out: list[tuple[int, int, int, int, int, int]] = []
    inst, arrival, ranks = (frame[c].to_numpy() for c in ("instance", "arrival_ns", "rank"))  # arrays: no per-row pandas
    for instance in caused.index[:MAX_INTERVALS]:
        members = np.flatnonzero(inst == instance)
        members = members[np.argsort(arrival[members], kind="quicksort")]  # as sort_values("arrival_ns")
        mine, others = members[ranks[members] == rank], members[ranks[members] != rank]
        if not len(mine) or not len(others):
            continue
        median = frame.iloc[others[(len(others) - 1) // 2]]
        out.append((rank, lo_of(frame.iloc[mine[0]]), int(arrival[mine[0]]), int(median["rank"]), lo_of(median),
                    int(median["arrival_ns"])))
    return out


def _offsets(analysis: Analysis) -> dict[int, int]:
    return {int(str(r)): int(v) for r, v in analysis.view(arrivals_view).offsets.items()}


def _activity(ev: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, Any]:
    """What ran in [lo, hi) (the rank's raw clock): overlapped ns per (kind, name), GPU busy, CPU in an op."""
    inside = (ev["end"] > lo) & (ev["start"] < hi)
    start, end, gpu, cpu = ev["start"][inside], ev["end"][inside], ev["gpu"][inside], ev["cpu"][inside]
    cover = np.minimum(end, hi) - np.maximum(start, lo)
    by_name: dict[tuple[str, str], float] = {}
    for k, n, c, g in zip(ev["kind"][inside], ev["name"][inside], cover, gpu | cpu):
        if g:
            by_name[(k, n)] = by_name.get((k, n), 0.0) + float(c)
    return {"span": hi - lo, "gpu_busy": float(clipped_total(start[gpu], end[gpu], lo, hi)),
            "cpu_busy": float(clipped_total(start[cpu], end[cpu], lo, hi)), "ops": by_name}


def before_arrival(analysis: Analysis, rank: int) -> BeforeArrival:
    """What `rank` did before its late arrivals against the median member (docs/internals/stepgraph.md)."""
    table = analysis.view(collective_split_view)
    spans = _intervals(analysis, table, rank)
    if not spans:
        return {}
    offsets = analysis.view(_offsets)
    events: dict[int, dict[str, np.ndarray]] = {}  # per rank, its event columns as arrays (once, not per span)
    totals: dict[str, dict[str, Any]] = {who: {"span": 0.0, "gpu_busy": 0.0, "cpu_busy": 0.0, "ops": Counter()}
                                         for who in ("mine", "median")}
    for r, lo, hi, m, mlo, mhi in spans:
        for who, rr, a, b in (("mine", r, lo, hi), ("median", m, mlo, mhi)):
            if rr not in events:
                mine_ev = analysis.store.rank_events(rr)
                ev = mine_ev[mine_ev["rank"] == rr]  # its rows alone, however the store hands them
                kind, name, start = ev["kind"].astype(str), ev["name"].astype(str), ev["start_ns"].to_numpy(np.int64)
                events[rr] = {"start": start, "end": start + ev["dur_ns"].to_numpy(np.int64), "kind": kind.to_numpy(),
                              "name": name.to_numpy(), "gpu": (kind.isin(_GPU) & (ev["stream"] >= 0)).to_numpy(),
                              "cpu": (kind.isin(_CPU) & ~name.str.startswith("ProfilerStep#")).to_numpy()}
            act = _activity(events[rr], a + offsets.get(rr, 0), b + offsets.get(rr, 0))
            for key in ("span", "gpu_busy", "cpu_busy"):
                totals[who][key] += act[key]
            totals[who]["ops"].update(act["ops"])
    mine, med = totals["mine"], totals["median"]
    gpu_seen = any(k[0] in _GPU for k in [*mine["ops"], *med["ops"]])  # a CPU-only job has no GPU to idle
    names = set(mine["ops"]) | set(med["ops"])
    extra = sorted(((mine["ops"].get(k, 0.0) - med["ops"].get(k, 0.0), k) for k in names), reverse=True)

    def cause_ms(ops: dict[tuple[str, str], float], cause: str) -> float:
        return sum(v for (k, n), v in ops.items() if CAUSES[cause].search(n) or cause == k == "memcpy") / 1e6

    causes = {c: round(cause_ms(mine["ops"], c) - cause_ms(med["ops"], c), 3) for c in CAUSES}
    gpu_ops = [(x, k) for x, k in extra if k[0] in _GPU and x > 0]
    cpu_ops = [(x, k) for x, k in extra if k[0] in _CPU and x > 0]
    return {
        "collectives": len(spans), "interval_ms": round(mine["span"] / 1e6, 3),
        "median_rank_interval_ms": round(med["span"] / 1e6, 3),
        "extra_gpu_work_ms": round((mine["gpu_busy"] - med["gpu_busy"]) / 1e6, 3),
        "extra_gpu_idle_ms": round(((mine["span"] - mine["gpu_busy"]) - (med["span"] - med["gpu_busy"])) / 1e6, 3)
        if gpu_seen else 0.0,
        "extra_cpu_gap_ms": round(((mine["span"] - mine["cpu_busy"]) - (med["span"] - med["cpu_busy"])) / 1e6, 3),
        "extra_cpu_ops_ms": round((mine["cpu_busy"] - med["cpu_busy"]) / 1e6, 3),
        "top_extra_gpu": [{"name": short_symbol(k[1], 80), "extra_ms": round(x / 1e6, 3)} for x, k in gpu_ops[:5]],
        "top_extra_cpu": [{"name": short_symbol(k[1], 80), "kind": k[0], "extra_ms": round(x / 1e6, 3)}
                          for x, k in cpu_ops[:5]],
        "extra_by_cause_ms": causes,
        "median_ranks": sorted({m for _, _, _, m, _, _ in spans}),
    }


def describe(did: BeforeArrival) -> str:
    """One clause: what the rank did before its late arrivals, against the median rank."""
    if not did:
        return ""
    causes = did["extra_by_cause_ms"]
    parts = [f"{fmt_ms(ms / 1e3)} {what}" for ms, what in (
        (did["extra_gpu_work_ms"], "more GPU work"), (did["extra_gpu_idle_ms"], "more GPU idle"),
        (did["extra_cpu_ops_ms"], "more time in CPU ops"), (did["extra_cpu_gap_ms"], "a longer CPU gap"),
        (causes["data_loader"], "more data loading"), (causes["host_sync"], "more host syncs"),
        (causes["memcpy"], "more memory copies")) if ms > 0.05 * max(did["interval_ms"], 1e-9)]
    top = sorted(did["top_extra_gpu"] + did["top_extra_cpu"], key=lambda o: -float(o["extra_ms"]))[:2]
    ops = ", ".join(f"{o['name']} (+{fmt_ms(o['extra_ms'] / 1e3)})" for o in top)
    head = (f"before those arrivals it worked {fmt_ms(did['interval_ms'] / 1e3)} against "
            f"{fmt_ms(did['median_rank_interval_ms'] / 1e3)} on the median rank")
    return head + (": " + ", ".join(parts) if parts else "") + (f"; most extra in {ops}" if ops else "")


def measured_wait_finding(analysis: Analysis, step_s: float, cost_s: float) -> Finding | None:
    """The rank the others waited for in a run of too few steps to judge persistence (docs/internals/stepgraph.md)."""
    table = analysis.view(collective_split_view)
    ranked = waited_for(table)
    if ranked.empty or ranked["caused_ns"].iloc[0] <= 0:
        return None
    rank = int(str(ranked.index[0]))
    row = ranked.iloc[0]
    steps = max(int(table.loc[table["step"] >= 0, "step"].nunique()), 1)
    world = int(table["rank"].nunique())
    per_rank_s = float(row["caused_ns"]) / max(world - 1, 1) / steps / 1e9
    share = per_rank_s / step_s if step_s > 0 else 0.0
    did = before_arrival(analysis, rank)
    instances = int(table["instance"].nunique())
    steps_text = "the 1 profiled step" if steps == 1 else f"the {steps} profiled steps"
    return Finding(
        analyzer="straggler", severity=Severity.WARNING if share >= threshold('straggler.late_rank_warn_share') else Severity.INFO,
        title=(f"The other ranks waited {fmt_ms(float(row['caused_ns']) / 1e9)} in all (rank-time) for rank {rank} in "
               f"{steps_text}: it arrived last at {int(row['times_last'])} of {instances} collectives; "
               + (describe(did) + "; " if did else "")
               + "persistence cannot be judged from so few steps"),
        recommendation=(f"This is a measurement of {steps_text}, not a verdict: profile more steps (torch.profiler "
                        "schedule active=6 or more) to tell a persistent straggler from a one-off. Look at what rank "
                        f"{rank} ran before its late arrivals (evidence: before_arrival)."),
        evidence=StragglerEvidence(
            caused_rank_ms=round(float(row["caused_ns"]) / 1e6, 3), times_last=int(row["times_last"]),
            collectives=instances, steps=steps, mean_wait_per_other_rank_ms=round(per_rank_s * 1e3, 3),
            waited_for={str(r): round(float(v) / 1e6, 3) for r, v in ranked["caused_ns"].head(8).items()},
            before_arrival=did),
        ranks=(rank,), hosts=hosts_of(analysis.store, [rank]), cost=Cost(cost_s, cost_s / step_s if step_s > 0 else 0.0),
        confidence=0.0, key=Mark.STRAGGLER_MEASURED.key(rank),
    )
