"""Temporal breakdown per rank: compute, exposed communication, exposed memory copies, idle.

Findings: an info summary of where GPU time goes, and a warning when exposed memory copies cost
a noticeable share of the step.
"""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, rank_list, step_seconds
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.traces.gpu_time import breakdown_view

MEMORY_SHARE_WARN = 0.05


def analyze_breakdown(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    table = analysis.view(breakdown_view)
    if table.empty:
        return []
    findings = [_summary(table)]
    step_s = step_seconds(store)
    mem = table.assign(per_step_s=table["memory_exposed_ns"] / table["steps"].clip(lower=1) / 1e9)
    mem["share"] = mem.apply(lambda r: r["per_step_s"] / step_s.get(r["rank"], 0) if step_s.get(r["rank"], 0)
                             else r["memory_exposed_pct"] / 100.0, axis=1)
    bad = mem[mem["share"] >= MEMORY_SHARE_WARN].sort_values("share", ascending=False)
    if not bad.empty:
        ranks = [int(r) for r in bad["rank"]]
        worst = bad.iloc[0]
        findings.append(Finding(
            analyzer="breakdown", severity=Severity.WARNING,
            title=f"Memory copies not hidden by compute take {100 * worst['share']:.0f}% of the step on rank "
                  f"{int(worst['rank'])} ({fmt_ms(worst['per_step_s'])} per step)",
            recommendation="Use pinned host memory and non_blocking=True for host-device copies, move data "
            "loading copies to a side stream, and avoid .cpu()/.item() inside the step.",
            evidence={"ranks": ranks, "memory_exposed_ms_per_step": {int(r): round(v * 1e3, 3)
                      for r, v in zip(bad["rank"], bad["per_step_s"])}},
            ranks=tuple(ranks), hosts=hosts_of(store, ranks),
            cost=Cost(float(bad["per_step_s"].median()), float(bad["share"].median())),
            key="breakdown:memory",
        ))
    return findings


def _summary(table: object) -> Finding:
    import pandas as pd

    assert isinstance(table, pd.DataFrame)
    med = table[["compute_pct", "comm_exposed_pct", "memory_exposed_pct", "idle_pct"]].median()
    ranks = [int(r) for r in table["rank"].unique()]
    return Finding(
        analyzer="breakdown", severity=Severity.INFO,
        title=(f"GPU time (median over {len(ranks)} rank(s)): compute {med['compute_pct']:.1f}%, exposed "
               f"communication {med['comm_exposed_pct']:.1f}%, exposed memory copies "
               f"{med['memory_exposed_pct']:.1f}%, idle {med['idle_pct']:.1f}%"),
        recommendation="Context for the other findings; the per-rank table is in the report.",
        evidence={"per_rank": {int(r["rank"]): {k: round(float(r[k]), 2) for k in
                                                 ("compute_pct", "comm_exposed_pct", "memory_exposed_pct",
                                                  "idle_pct")} for _, r in table.head(256).iterrows()},
                  "ranks": rank_list(ranks)},
        ranks=tuple(ranks), key="breakdown:summary",
    )
