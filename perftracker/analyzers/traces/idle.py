"""GPU idle gaps, attributed where the trace gives evidence."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.analyzers.traces.exec_trace import op_shapes
from perftracker.analyzers.traces.gpu_time import as_int, gpu_work, gpu_work_view
from perftracker.analyzers.traces.grouping import value_test
from perftracker.analyzers.traces.intervals import covered_within, union
from perftracker.analyzers.traces.period_costs import basis_row, per_period, rank_costs_view
from perftracker.analyzers.traces.periods import cost_periods_view
from perftracker.evidence.traces import IdleEvidence, IdleRow
from perftracker.store import Store

CATEGORIES = ("between_steps", "sync", "host", "launch", "dependency")
_SYNC_CALL = r"Synchronize|^cudaMemcpy$|^hipMemcpy$|^cudaMemcpy2D$|^cudaFree$"

_TEXT = {
    "between_steps": ("The GPU waits between steps for {t} {per} (data loading or host work at the step "
                      "boundary)",
                      "Speed up the input pipeline (DataLoader num_workers, pin_memory=True, prefetch_factor, "
                      "persistent_workers) and move logging, metric .item() calls and checkpointing off the "
                      "step boundary."),
    "sync": ("The GPU idles {t} {per} after CPU synchronizations",
             "Remove synchronizing calls from the step: tensor.item(), .cpu(), print(tensor), "
             "torch.cuda.synchronize(), blocking cudaMemcpy; keep metrics on the GPU and read them every N steps."),
    "launch": ("The GPU is launch-bound: it waits {t} {per} for the CPU to queue kernels",
               "Reduce launch overhead: capture the step with CUDA graphs (torch.compile(mode='reduce-overhead') "
               "or torch.cuda.graphs), fuse small kernels (torch.compile), or give each launch more work "
               "(larger batch or micro-batch)."),
    "host": ("The GPU waits {t} {per} for the CPU (host-side work before the next launch)",
             "The CPU is the bottleneck between kernels: profile the Python side (perftracker's stacks, "
             "py-spy) for framework overhead, move CPU work (data preparation, bookkeeping) off the step's "
             "critical path, and consider torch.compile or CUDA graphs."),
    "dependency": ("Queued GPU work waits {t} {per} on dependencies (other streams, events, communication)",
                   "Look at cross-stream waits: communication kernels the compute stream depends on, "
                   "event waits, and collectives that start late on other ranks."),
}


GAP_COLUMNS = ["rank", "window", "start_ns", "dur_ns", "category", "next_correlation"]


def idle_gaps(store: Store, work: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU idle gap: rank, window, start_ns, dur_ns, category and the correlation id of the work after
    it (-1 unknown), computed rank by rank over its own launches and synchronizations (`work`: `gpu_work(store)`)."""
    work = gpu_work(store) if work is None else work
    if work.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    frames = []
    is_sync = value_test(store.events_schema(["name"])["name"], _is_sync_call)
    for rank, rank_work in work.groupby("rank", sort=True, observed=True):
        ev = store.rank_events(as_int(rank))
        runtime = (ev["kind"] == "runtime").to_numpy()
        launches = ev[runtime & (ev["correlation"] >= 0).to_numpy()]
        syncs = ev[runtime & is_sync(ev["name"])]
        for (_, window), group in rank_work.groupby(["rank", "window"], sort=True, observed=True):
            frames.append(_gaps_for(group, launches, syncs, as_int(rank), as_int(window)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _is_sync_call(name: str) -> bool:
    return re.search(_SYNC_CALL, name) is not None


def _gaps_for(group: pd.DataFrame, launches: pd.DataFrame, syncs: pd.DataFrame, rank: int,
              window: int) -> pd.DataFrame:
    group = group.sort_values("start_ns")
    s, e = union(group["start_ns"].to_numpy(np.int64), group["end_ns"].to_numpy(np.int64))
    if len(s) < 2:
        return pd.DataFrame(columns=GAP_COLUMNS)
    gap_start, gap_end = e[:-1], s[1:]
    keep = (gap_end - gap_start) >= threshold_int("idle.min_gap_ns")
    gap_start, gap_end = gap_start[keep], gap_end[keep]
    starts = group["start_ns"].to_numpy(np.int64)
    first_at = np.searchsorted(starts, gap_end, side="left")
    next_corr = group["correlation"].to_numpy()[np.clip(first_at, 0, len(starts) - 1)]
    next_step = group["step"].to_numpy()[np.clip(first_at, 0, len(starts) - 1)]
    prev_at = np.searchsorted(starts, gap_start, side="left") - 1
    prev_step = group["step"].to_numpy()[np.clip(prev_at, 0, len(starts) - 1)]
    mine = launches[(launches["rank"] == rank) & (launches["window"] == window)]
    launch_at = pd.Series(mine["start_ns"].to_numpy(), index=mine["correlation"].to_numpy())
    launch_at = launch_at[~launch_at.index.duplicated()]
    launched = pd.Series(next_corr).map(launch_at).to_numpy(dtype=float)
    sync_mine = syncs[(syncs["rank"] == rank) & (syncs["window"] == window)]
    sync_end = np.sort((sync_mine["start_ns"] + sync_mine["dur_ns"]).to_numpy(np.int64))
    category = np.full(len(gap_start), "dependency", dtype=object)
    host_late = ~np.isnan(launched) & (launched >= gap_start)
    crossed = (next_step != prev_step) & (next_step >= 0)
    launch_ref = np.where(np.isnan(launched), gap_end, launched).astype(np.int64)
    lo = np.searchsorted(sync_end, gap_start, side="left")
    hi = np.searchsorted(sync_end, launch_ref, side="right")
    synced = hi > lo
    category[host_late] = np.where((gap_end - gap_start)[host_late] < threshold_int("idle.launch_gap_ns"),
                                   "launch", "host")
    category[host_late & synced] = "sync"
    category[crossed] = "between_steps"
    return pd.DataFrame({"rank": rank, "window": window, "start_ns": gap_start, "dur_ns": gap_end - gap_start,
                         "category": category, "next_correlation": next_corr})


def idle_gaps_view(analysis: Analysis) -> pd.DataFrame:
    """Every GPU idle gap of the run, attributed (see `idle_gaps`)."""
    return idle_gaps(analysis.store, analysis.view(gpu_work_view))


def idle_view(analysis: Analysis) -> pd.DataFrame:
    """Idle time per rank and category: rank, category, dur_ns."""
    gaps = analysis.view(idle_gaps_view)
    if gaps.empty:
        return pd.DataFrame(columns=["rank", "category", "dur_ns"])
    return gaps.groupby(["rank", "category"])["dur_ns"].sum().reset_index()


def idle_costs(gaps: pd.DataFrame, periods: pd.DataFrame) -> pd.DataFrame:
    """Per rank and category: the gaps' time inside the cost periods (idle_ns), how many gaps, their median."""
    columns = ["rank", "category", "idle_ns", "gaps", "median_ns"]
    if gaps.empty or periods.empty:
        return pd.DataFrame(columns=columns)
    bounds = {key: (g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
              for key, g in periods.groupby(["rank", "window"])}
    gaps = gaps[[key in bounds for key in zip(gaps["rank"], gaps["window"])]].sort_values("start_ns")
    if gaps.empty:
        return pd.DataFrame(columns=columns)
    inside = {key: int(covered_within(s := g["start_ns"].to_numpy(np.int64), s + g["dur_ns"].to_numpy(np.int64),
                                      *bounds[key[:2]]).sum())
              for key, g in gaps.groupby(["rank", "window", "category"], sort=True)}
    table = gaps.groupby(["rank", "category"], as_index=False).agg(gaps=("dur_ns", "size"), median_ns=("dur_ns", "median"))
    idle = pd.Series(inside).groupby(level=[0, 2]).sum()
    table["idle_ns"] = idle.reindex(pd.MultiIndex.from_frame(table[["rank", "category"]])).to_numpy(np.int64)
    return table[columns]


def idle_costs_view(analysis: Analysis) -> pd.DataFrame:
    """Idle time per rank and category inside the cost periods (see `idle_costs`)."""
    return idle_costs(analysis.view(idle_gaps_view), analysis.view(cost_periods_view))


def analyze_idle(analysis: Analysis) -> list[Finding]:
    # gap_ops reads this module's gaps; imported here, where both modules are complete
    from perftracker.analyzers.traces.gap_ops import cpu_ops_during, gap_evidence, gap_headline

    store = analysis.store
    gaps = analysis.view(idle_gaps_view)
    per = analysis.view(idle_costs_view)
    costs = analysis.view(rank_costs_view)
    if gaps.empty or per.empty or costs.empty:
        return []
    per = per_period(per.merge(costs[["rank", "periods", "dur_ns", "basis", "clock", "marker"]], on="rank"),
                     "idle_ns")
    shapes = op_shapes(analysis)
    findings = []
    for category in CATEGORIES:
        rows = per[(per["category"] == category) & (per["share"] >= threshold("idle.warn_share"))]
        if rows.empty:
            continue
        rows = rows.sort_values("share", ascending=False)
        ranks = [int(r) for r in rows["rank"]]
        title, advice = _TEXT[category]
        median_s = float(rows["per_period_s"].median())
        basis = basis_row(rows.iloc[0])
        mine = gaps[(gaps["category"] == category) & gaps["rank"].isin(ranks)]
        evidence = IdleEvidence(
            per_rank={int(r["rank"]): IdleRow(idle_ms_per_step=round(float(r["per_period_s"]) * 1e3, 3),
                                              gaps=int(r["gaps"]), median_gap_us=round(float(r["median_ns"]) / 1e3, 1))
                      for _, r in rows.head(64).iterrows()},
            measured_over=basis.describe(), cpu_ops_during_gaps=cpu_ops_during(store, mine, shapes=shapes))
        evidence.update(gap_evidence(analysis, category, ranks))  # the CPU ops and kernels behind these gaps
        findings.append(Finding(
            analyzer="idle",
            severity=Severity.WARNING if category != "dependency" else Severity.INFO,
            title=title.format(t=fmt_ms(median_s), per=basis.per)
            + f" ({100 * float(rows['share'].median()):.0f}% {basis.of})" + gap_headline(evidence),
            recommendation=advice, evidence=evidence,
            ranks=tuple(ranks), hosts=hosts_of(store, ranks),
            cost=Cost(median_s, float(rows["share"].median())), key=f"idle:{category}",
        ))
    return findings
