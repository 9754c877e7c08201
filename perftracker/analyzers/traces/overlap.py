"""Communication/computation overlap per rank, and the communication left exposed per step.

Exposed communication is GPU time in communication kernels with no compute kernel running: the
step waits for the network. Warns when it costs 5% of the step or more (critical from 25%).
"""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, step_seconds
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.traces.gpu_time import breakdown_view

WARN_SHARE = 0.05
CRITICAL_SHARE = 0.25


def analyze_overlap(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    table = analysis.view(breakdown_view)
    if table.empty or not (table["comm_ns"] > 0).any():
        return []
    step_s = step_seconds(store)
    table = table[table["comm_ns"] > 0].copy()
    table["exposed_s"] = table["comm_exposed_ns"] / table["steps"].clip(lower=1) / 1e9
    table["share"] = [e / step_s[r] if r in step_s.index and step_s[r] > 0 else p / 100.0
                      for r, e, p in zip(table["rank"], table["exposed_s"], table["comm_exposed_pct"])]
    bad = table[table["share"] >= WARN_SHARE].sort_values("share", ascending=False)
    if bad.empty:
        return []
    ranks = [int(r) for r in bad["rank"]]
    med_share = float(bad["share"].median())
    med_overlap = float(bad["overlap_pct"].median())
    severity = Severity.CRITICAL if med_share >= CRITICAL_SHARE else Severity.WARNING
    return [Finding(
        analyzer="overlap", severity=severity,
        title=(f"Communication is exposed for {fmt_ms(float(bad['exposed_s'].median()))} per step "
               f"({100 * med_share:.0f}% of the step); only {med_overlap:.0f}% of it overlaps compute"),
        recommendation=(
            "Overlap gradient communication with backward compute: with DDP tune bucket_cap_mb (smaller "
            "buckets start earlier) and set gradient_as_bucket_view=True; with FSDP enable backward_prefetch "
            "and forward_prefetch; in Megatron use --overlap-grad-reduce / --overlap-param-gather. Remove "
            "synchronizations (.item(), torch.cuda.synchronize) between backward and the optimizer step."),
        evidence={
            "per_rank": {int(r["rank"]): {"overlap_pct": round(float(r["overlap_pct"]), 2),
                                          "exposed_ms_per_step": round(float(r["exposed_s"]) * 1e3, 3),
                                          "comm_ms_total": round(float(r["comm_ns"]) / 1e6, 3)}
                         for _, r in bad.head(64).iterrows()},
        },
        ranks=tuple(ranks), hosts=hosts_of(store, ranks),
        cost=Cost(float(bad["exposed_s"].median()), med_share), key="overlap:exposed",
    )]
