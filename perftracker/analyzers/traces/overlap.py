"""Communication/computation overlap per rank, and the communication left exposed per step.

Exposed communication is GPU time in communication kernels (any library of data/comm_kernels.toml)
transferring with no compute kernel running: the step waits for the network. A kernel's wait for the last
rank to arrive is not communication (`comm_split`): it is the late rank's cost, named by the straggler
analyzer, and no overlap advice is given for it (the evidence shows it per rank apart). It is measured inside each rank's
cost periods (`periods`: profiler steps, on the GPU's clock when the GPU runs behind the CPU; inferred
iterations; or the whole window), so its share is of the time it was measured in and never above
100%. Warns when it costs 5% of the step or more (critical from 25%); the finding says what the
costs were measured over.
"""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.period_costs import basis_row, per_period, rank_costs_view


def analyze_overlap(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    table = analysis.view(rank_costs_view)
    if table.empty or not (table["comm_ns"] > 0).any():
        return []
    table = per_period(table[table["comm_ns"] > 0], "comm_exposed_ns")
    table["hidden_pct"] = 100.0 * table["comm_hidden_ns"] / table["comm_ns"]
    bad = table[table["share"] >= threshold("overlap.warn_share")].sort_values("share", ascending=False)
    if bad.empty:
        return []
    ranks = [int(r) for r in bad["rank"]]
    med_share = float(bad["share"].median())
    med_overlap = float(bad["hidden_pct"].median())
    basis = basis_row(bad.iloc[0])
    severity = Severity.CRITICAL if med_share >= threshold("overlap.critical_share") else Severity.WARNING
    return [Finding(
        analyzer="overlap", severity=severity,
        title=(f"Communication is exposed for {fmt_ms(float(bad['per_period_s'].median()))} {basis.per} "
               f"({100 * med_share:.0f}% {basis.of}); only {med_overlap:.0f}% of it overlaps compute"),
        recommendation=(
            "Overlap gradient communication with backward compute: with DDP tune bucket_cap_mb (smaller "
            "buckets start earlier) and set gradient_as_bucket_view=True; with FSDP enable backward_prefetch "
            "and forward_prefetch; in Megatron use --overlap-grad-reduce / --overlap-param-gather. Remove "
            "synchronizations (.item(), torch.cuda.synchronize) between backward and the optimizer step."),
        evidence={
            "per_rank": {int(r["rank"]): {"overlap_pct": round(float(r["hidden_pct"]), 2),
                                          "exposed_ms_per_step": round(float(r["per_period_s"]) * 1e3, 3),
                                          "waiting_for_late_ranks_ms_per_step": round(
                                              float(r["wait_exposed_ns"]) / max(int(r["periods"]), 1) / 1e6, 3),
                                          "comm_ms_total": round(float(r["comm_ns"]) / 1e6, 3)}
                         for _, r in bad.head(64).iterrows()},
            "measured_over": basis.describe(),
        },
        ranks=tuple(ranks), hosts=hosts_of(store, ranks),
        cost=Cost(float(bad["per_period_s"].median()), med_share), key="overlap:exposed",
    )]
