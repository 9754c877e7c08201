"""Communication/computation overlap per rank, and the communication left exposed per step."""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of
from perftracker.analyzers.findings import Cost, Finding, Mark, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.period_costs import basis_row, per_period, rank_costs_view
from perftracker.evidence.traces import OverlapEvidence, OverlapRow
from perftracker.store import Store


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
    profiled, world = _profiled_of(store)
    unsplit = world > profiled  # collectives with unprofiled members: their waiting is not told apart
    title = (f"Communication is exposed for {fmt_ms(float(bad['per_period_s'].median()))} {basis.per} "
             f"({100 * med_share:.0f}% {basis.of}); only {med_overlap:.0f}% of it overlaps compute")
    advice = ("Overlap gradient communication with backward compute: with DDP tune bucket_cap_mb (smaller "
              "buckets start earlier) and set gradient_as_bucket_view=True; with FSDP enable backward_prefetch "
              "and forward_prefetch; in Megatron use --overlap-grad-reduce / --overlap-param-gather. Remove "
              "synchronizations (.item(), torch.cuda.synchronize) between backward and the optimizer step.")
    if unsplit:
        # one rank's communication kernel also spins while it waits for late peers; without their traces that
        # waiting cannot be cut off, so the figure is an upper bound and not a verdict on the overlap
        severity = min(severity, Severity.WARNING)
        title += (f"; with {profiled} of {world} ranks profiled, this includes any waiting for late ranks, "
                  "which cannot be told apart")
        advice = (f"First profile every rank (or several on different nodes): only {profiled} of {world} were, so "
                  "part of this time may be waiting for a late rank (a straggler's cost, not an overlap problem). "
                  "If it is transfer: " + advice[0].lower() + advice[1:])
    evidence = OverlapEvidence(per_rank={int(r["rank"]): OverlapRow(
        overlap_pct=round(float(r["hidden_pct"]), 2), exposed_ms_per_step=round(float(r["per_period_s"]) * 1e3, 3),
        waiting_for_late_ranks_ms_per_step=round(float(r["wait_exposed_ns"]) / max(int(r["periods"]), 1) / 1e6, 3),
        comm_ms_total=round(float(r["comm_ns"]) / 1e6, 3)) for _, r in bad.head(64).iterrows()},
        measured_over=basis.describe())
    if unsplit:
        evidence.update({"ranks_profiled": profiled, "world_size": world, "waiting_told_apart": False})
    return [Finding(
        analyzer="overlap", severity=severity, title=title, recommendation=advice, evidence=evidence,
        ranks=tuple(ranks), hosts=hosts_of(store, ranks),
        cost=Cost(float(bad["per_period_s"].median()), med_share), key=Mark.OVERLAP_EXPOSED.key(),
    )]


def _profiled_of(store: Store) -> tuple[int, int]:
    """(ranks profiled, the job's world size as the traces state it; the first when unknown)."""
    ranks = store.ranks
    if ranks.empty:
        return 0, 0
    profiled = int(ranks["rank"].nunique())
    world = int(ranks["world_size"].max()) if "world_size" in ranks else -1
    return profiled, max(world, profiled)
