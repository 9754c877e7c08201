"""Can this host signal be the cause of that straggler? Where the straggler's extra time is, and when.

`straggler_locus(analysis, finding)` says where a straggler's extra time is spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Kind
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.analyzers.traces.gpu_time import breakdown_view
from perftracker.evidence import as_evidence
from perftracker.evidence.network import GpuHealthEvidence, GpuLinksEvidence, RdmaEvidence, RdmaPfcEvidence
from perftracker.evidence.steps import StragglerEvidence

# where a host finding acts: GPU health on the GPU; NIC ports, RoCE flow control, NVLink / PCIe links on the network
SIGNAL_LOCUS: dict[str, str] = {Kind.GPU_HEALTH: "gpu", Kind.RDMA: "network", Kind.RDMA_PFC: "network",
                                Kind.GPU_LINKS: "network"}


@dataclass(frozen=True)
class Relation:
    kind: str  # "explains" | "possible cause" | "also seen on that host"
    why: str

    @property
    def explains(self) -> bool:
        return self.kind == "explains"


def _gpu_extra_s(analysis: Analysis, rank: int) -> float | None:
    """How much longer per step this rank's compute kernels run than its peers' median (s); None without
    GPU kernels in its trace."""
    table = analysis.view(breakdown_view)
    if table.empty or "compute_ns" not in table:
        return None
    per_step = table.assign(per_step=table["compute_ns"] / table["steps"].clip(lower=1)).groupby("rank")["per_step"].sum()
    if rank not in per_step.index or float(per_step[rank]) <= 0:
        return None
    peers = per_step.drop(index=rank)
    return float(per_step[rank] - peers.median()) / 1e9 if len(peers) else None


def straggler_locus(analysis: Analysis, f: Finding) -> str:
    """"gpu", "cpu", "network" or "" for a finding naming one slow rank (docs/internals/analyzers.md)."""
    ev = as_evidence(f.evidence, StragglerEvidence) if f.analyzer == Kind.STRAGGLER else StragglerEvidence()
    if ev.get("kind") == "communication":
        return "network"
    if f.analyzer == Kind.STACK_PROFILE:
        return "cpu"  # sampled Python stacks: its own CPU-side work takes the time
    rank = f.ranks[0]
    if not (analysis.store.rank_events(rank)["rank"] == rank).any():
        return ""
    gpu_extra = _gpu_extra_s(analysis, rank)
    if gpu_extra is None:
        return "cpu"  # its trace holds no GPU kernels: the extra time is CPU-side
    extra = ev.get("extra_work_before_collective_ms")
    if isinstance(extra, (int, float)) and extra > 0:
        return "gpu" if gpu_extra >= threshold("rootcause.gpu_share_of_extra") * float(extra) / 1e3 else "cpu"
    cost = f.cost.seconds_per_step
    return "gpu" if gpu_extra > 0 and (cost <= 0 or gpu_extra >= threshold("rootcause.gpu_share_of_extra") * cost) else "cpu"


def straggler_window(analysis: Analysis, f: Finding) -> tuple[int, int] | None:
    """Epoch ns (start, end) of the straggler's evidence: its traced window, else its step-file steps."""
    rank = f.ranks[0]
    store = analysis.store
    ranks = store.ranks
    if store.n_events and len(ranks):
        mine = store.rank_events(rank)
        mine = mine[mine["rank"] == rank]
        base = ranks.loc[(ranks["rank"] == rank) & (ranks["base_ns"] > 0), "base_ns"]
        if len(mine) and len(base):
            b = int(base.iloc[0])
            return b + int(mine["start_ns"].min()), b + int((mine["start_ns"] + mine["dur_ns"]).max())
    steps = store.steps
    files = steps[(steps["rank"] == rank) & (steps["source"] == "stepfile")] if len(steps) else steps
    if len(files) and int(files["start_ns"].min()) > 10**17:  # wall-clock ns (time.time_ns())
        return int(files["start_ns"].min()), int((files["start_ns"] + files["dur_ns"]).max())
    return None


def signal_windows(f: Finding) -> list[tuple[int, int]]:
    """The epoch-ns spans a host finding's evidence covers: its periods (e.g. throttling), else its window."""
    periods = as_evidence(f.evidence, GpuHealthEvidence).get("periods") if f.analyzer == Kind.GPU_HEALTH else None
    spans = [(int(p[0]), int(p[1])) for p in periods or [] if isinstance(p, (list, tuple)) and len(p) == 2]
    if spans:
        return spans
    window = as_evidence(f.evidence, GpuHealthEvidence if f.analyzer == Kind.GPU_HEALTH else GpuLinksEvidence if
                         f.analyzer == Kind.GPU_LINKS else RdmaPfcEvidence if f.analyzer == Kind.RDMA_PFC
                         else RdmaEvidence).get("window")  # a host finding's: one of the four kinds
    if isinstance(window, dict) and isinstance(window.get("start_ns"), int) and isinstance(window.get("end_ns"), int):
        return [(int(window["start_ns"]), int(window["end_ns"]))]
    return []


def _clock(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


_ELSEWHERE = {
    ("gpu", "cpu"): "a GPU signal cannot explain extra time spent on the CPU (its trace shows no longer GPU kernels)",
    ("gpu", "network"): "a GPU signal cannot explain slower transfers",
    ("network", "cpu"): "a network signal cannot explain extra CPU-side work before the collectives",
    ("network", "gpu"): "a network signal cannot explain longer GPU kernels",
}


def relation(signal: Finding, locus: str, window: tuple[int, int] | None) -> Relation:
    """How `signal` (a host finding on the straggler's GPU or NIC) relates to a straggler whose extra time is
    at `locus` during `window`."""
    acts = SIGNAL_LOCUS.get(signal.analyzer, "")
    if not locus:
        return Relation("possible cause", "no trace shows where the straggler's extra time goes, so this cannot "
                                          "be confirmed or ruled out")
    if acts != locus:
        return Relation("also seen on that host", _ELSEWHERE.get((acts, locus), "it acts elsewhere"))
    spans = signal_windows(signal)
    if window is None or not spans:
        return Relation("explains", "it acts where the extra time is (no wall times to compare)")
    start, end = window
    slack = threshold_int("rootcause.time_slack_ns")
    if any(s <= end + slack and e >= start - slack for s, e in spans):
        return Relation("explains", "it acts where the extra time is, during the late steps")
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    return Relation("also seen on that host", f"it was seen {_clock(first)} to {_clock(last)}, not while the rank "
                                              f"was late ({_clock(start)} to {_clock(end)})")
