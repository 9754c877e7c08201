"""Temporal breakdown per rank: compute, exposed communication (transfer only), waiting for late ranks,
exposed memory copies, idle.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, rank_list
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.gpu_time import as_int, breakdown_view
from perftracker.analyzers.traces.period_costs import (
    basis_row,
    comm_library_costs_view,
    per_period,
    rank_costs_view,
)
from perftracker.evidence.traces import BreakdownEvidence, BreakdownRow, LibraryRow

SHARES = ("compute_pct", "comm_exposed_pct", "wait_exposed_pct", "memory_exposed_pct", "idle_pct")


def analyze_breakdown(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    table = analysis.view(breakdown_view)
    if table.empty:
        return []
    costs = analysis.view(rank_costs_view)
    findings = [_summary(table, costs, analysis.view(comm_library_costs_view),
                         store.run_info.comm_libraries)]
    if costs.empty:
        return findings
    mem = per_period(costs, "memory_exposed_ns")
    bad = mem[mem["share"] >= threshold("breakdown.memory_share_warn")].sort_values("share", ascending=False)
    if not bad.empty:
        ranks = [int(r) for r in bad["rank"]]
        worst = bad.iloc[0]
        basis = basis_row(worst)
        findings.append(Finding(
            analyzer="breakdown", severity=Severity.WARNING,
            title=f"Memory copies not hidden by compute take {100 * worst['share']:.0f}% {basis.of} on rank "
                  f"{int(worst['rank'])} ({fmt_ms(worst['per_period_s'])} {basis.per})",
            recommendation="Use pinned host memory and non_blocking=True for host-device copies, move data "
            "loading copies to a side stream, and avoid .cpu()/.item() inside the step.",
            evidence=BreakdownEvidence(ranks=ranks, memory_exposed_ms_per_step={
                int(r): round(v * 1e3, 3) for r, v in zip(bad["rank"], bad["per_period_s"])},
                measured_over=basis.describe()),
            ranks=tuple(ranks), hosts=hosts_of(store, ranks),
            cost=Cost(float(bad["per_period_s"].median()), float(bad["share"].median())),
            key="breakdown:memory",
        ))
    return findings


def _summary(table: pd.DataFrame, costs: pd.DataFrame, libraries: pd.DataFrame,
             known: dict[str, dict[str, Any]]) -> Finding:
    med = table[list(SHARES)].median()
    ranks = [int(r) for r in table["rank"].unique()]
    sums = table.groupby("rank")[["span_ns", "comm_ns"]].sum()
    window = {as_int(r): (float(span), float(comm)) for r, span, comm in zip(sums.index, sums["span_ns"], sums["comm_ns"])}
    by_rank: dict[int, dict[str, Any]] = {int(c["rank"]): {str(k): v for k, v in c.items()}
                                          for c in costs.to_dict("records")}
    per_rank: dict[int, BreakdownRow] = {}
    for _, r in table.head(256).iterrows():
        rank = int(r["rank"])
        cp, cx, wx, mx, ip = (round(float(r[k]), 2) for k in SHARES)
        entry = BreakdownRow(compute_pct=cp, comm_exposed_pct=cx, wait_exposed_pct=wx, memory_exposed_pct=mx, idle_pct=ip)
        span, comm = window[rank]
        entry["comm_pct"] = round(100.0 * comm / span, 2) if span > 0 else 0.0
        c = by_rank.get(rank)
        if c is not None:
            periods = max(int(c["periods"]), 1)
            entry["comm_ms_per_step"] = round(float(c["comm_ns"]) / periods / 1e6, 3)
            entry["comm_hidden_pct"] = _pct(float(c["comm_hidden_ns"]), float(c["comm_ns"]))
            if float(c["ep_comm_ns"]) > 0:
                entry["expert_parallel_ms_per_step"] = round(float(c["ep_comm_ns"]) / periods / 1e6, 3)
                entry["expert_parallel_hidden_pct"] = _pct(float(c["ep_hidden_ns"]), float(c["ep_comm_ns"]))
        mine = libraries[libraries["rank"] == rank] if not libraries.empty else libraries
        if len(mine):
            entry["by_library"] = {str(x["family"]): LibraryRow(
                ms_per_step=round(float(x["comm_ns"]) / max(int(x["periods"]), 1) / 1e6, 3),
                hidden_pct=_pct(float(x["hidden_ns"]), float(x["comm_ns"]))) for _, x in mine.iterrows()}
        per_rank[rank] = entry
    evidence = BreakdownEvidence(per_rank=per_rank, ranks=rank_list(ranks))
    if not costs.empty:
        evidence["measured_over"] = basis_row(costs.iloc[0]).describe()
    if known:
        evidence["comm_libraries"] = {name: str(info.get("library", name)) for name, info in known.items()}
    waiting = (f", waiting for late ranks in communication kernels {med['wait_exposed_pct']:.1f}%"
               if med["wait_exposed_pct"] > 0 else "")
    title = (f"GPU time (median over {len(ranks)} rank(s)): compute {med['compute_pct']:.1f}%, exposed "
             f"communication {med['comm_exposed_pct']:.1f}%{waiting}, exposed memory copies "
             f"{med['memory_exposed_pct']:.1f}%, idle {med['idle_pct']:.1f}%")
    title += _comm_clause(per_rank, costs)
    return Finding(
        analyzer="breakdown", severity=Severity.INFO, title=title,
        recommendation="Context for the other findings; the per-rank table is in the report.",
        evidence=evidence, ranks=tuple(ranks), key="breakdown:summary",
    )


def _comm_clause(per_rank: dict[int, BreakdownRow], costs: pd.DataFrame) -> str:
    """'; communication 41.2 ms per step, 63% hidden (expert-parallel: 28.1 ms per step, 96% hidden)' or ''."""
    with_comm = [e for e in per_rank.values() if e.get("comm_ms_per_step", 0) > 0]
    if not with_comm or costs.empty:
        return ""
    per = basis_row(costs.iloc[0]).per
    ms = pd.Series([e.get("comm_ms_per_step", 0.0) for e in with_comm]).median()
    hidden = pd.Series([e.get("comm_hidden_pct", 0.0) for e in with_comm]).median()
    clause = f"; all communication {fmt_ms(ms / 1e3)} {per}, {hidden:.0f}% of it hidden under compute"
    ep = [e for e in with_comm if "expert_parallel_ms_per_step" in e]
    if ep:
        ep_ms = pd.Series([e.get("expert_parallel_ms_per_step", 0.0) for e in ep]).median()
        ep_hidden = pd.Series([e.get("expert_parallel_hidden_pct", 0.0) for e in ep]).median()
        clause += f" (expert-parallel: {fmt_ms(ep_ms / 1e3)} {per}, {ep_hidden:.0f}% hidden)"
    return clause


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0
