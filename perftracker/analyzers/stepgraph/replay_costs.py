"""What-if costs: each finding's cost as the step time a replay without its cause saves.

`replay_view` (the run's step graph, its replay, error, S and waste), `whatif_ranks_view`, `critical_path_view`;
`with_replay_costs(analysis, findings)` costs the findings one after another, so the costs never count the same
time twice, and marks every cost's `cost_source` (replay | estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Kind, Mark
from perftracker.analyzers.stepgraph.critical_path import classified_spans, critical_path
from perftracker.analyzers.stepgraph.replay import (
    Replay,
    StepGraph,
    fix_each_rank,
    idealize,
    replay,
    slowdown,
    step_graph,
    with_transfer,
)
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.traces.period_costs import rank_costs_view
from perftracker.evidence import as_evidence
from perftracker.evidence.common import PassEvidence

_RANK_KEY = (Mark.STRAGGLER_MEASURED, Mark.STRAGGLER_RANK)


@dataclass(frozen=True)
class ReplayFit:
    """The run's step graph, its unchanged replay and how well that replay fits the measured steps."""

    graph: StepGraph
    replay: Replay
    error: float  # median relative error of the replayed step time; nan when nothing was replayed
    slowdown: float
    waste: float

    @property
    def usable(self) -> bool:
        return bool(np.isfinite(self.error) and self.error <= threshold('replay.max_error'))


def replay_view(analysis: Analysis) -> ReplayFit:
    """The run's `ReplayFit` (docs/internals/stepgraph.md)."""
    table = analysis.view(collective_split_view)
    offsets = analysis.view(arrivals_view).offsets
    graph = step_graph(table, analysis.store.steps, offsets)
    play = replay(graph)
    s, waste = slowdown(graph) if not graph.nodes.empty else (1.0, 0.0)
    return ReplayFit(graph, play, play.error() if not graph.nodes.empty else float("nan"), s, waste)


def replay_steps_view(analysis: Analysis) -> pd.DataFrame:
    """Per step: measured and replayed step time (mean over ranks, ns) and the relative error."""
    return analysis.view(replay_view).replay.step_times()


def whatif_ranks_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank with work above its peers' (at most `replay.FIX_RANKS_MAX`): the step time saved when it is
    fixed (`saved_ns`) and OSDI'25's S_w; empty when the replay does not fit the measured steps."""
    fit = analysis.view(replay_view)
    if not fit.usable:
        return pd.DataFrame(columns=["rank", "excess_ns", "saved_ns", "s_w"])
    return fix_each_rank(fit.graph)


def critical_path_view(analysis: Analysis) -> pd.DataFrame:
    """Per (step, rank, bound class, for_rank): the rank's time there and the critical path's (`critical_path`)."""
    fit = analysis.view(replay_view)
    offsets = analysis.view(arrivals_view).offsets
    return critical_path(fit.graph, fit.replay, classified_spans(analysis, fit.graph, offsets))


def _target_rank(finding: Finding) -> int | None:
    """The rank whose extra work a finding is about: a straggler of one rank (`straggler:<r>`,
    `straggler:measured:<r>`) or one rank's slow phase (`steps:phase:<phase>:<r>`)."""
    head, _, tail = finding.key.rpartition(":")
    one_rank = finding.analyzer == Kind.STRAGGLER and head + ":" in _RANK_KEY or Mark.STEPS_PHASE.on(finding)
    if len(finding.ranks) != 1 or not one_rank:
        return None
    return int(tail) if tail.isdigit() and int(tail) == finding.ranks[0] else None


def _hidden_share(analysis: Analysis) -> pd.Series:
    """Per rank: the exposed share of its transfer time."""
    costs = analysis.view(rank_costs_view)
    if costs.empty:
        return pd.Series(dtype=float)
    per = costs.groupby("rank")[["comm_ns", "comm_exposed_ns"]].sum()
    share = per["comm_exposed_ns"] / per["comm_ns"].where(per["comm_ns"] > 0)
    return share.fillna(0.0)


def with_replay_costs(analysis: Analysis, findings: list[Finding]) -> list[Finding]:
    """`findings` with replay costs where the replay fits, and `cost_source` on every finding with a cost."""
    fit = analysis.view(replay_view) if any(f.cost.seconds_per_step > 0 for f in findings) else None
    targets = [(i, f) for i, f in enumerate(findings)
               if f.cost.seconds_per_step > 0 and (_target_rank(f) is not None or Mark.OVERLAP_EXPOSED.on(f))]
    replayed: dict[int, tuple[float, float, str]] = {}
    error = float("nan")
    if fit is not None and fit.usable and targets:
        replayed, error = _costs(analysis, fit, targets), round(fit.error, 4)
    out = []
    for i, f in enumerate(findings):
        if f.cost.seconds_per_step <= 0 or as_evidence(f.evidence, PassEvidence).get("cost_source") == "replay":
            out.append(f)  # costed by its own replay
            continue
        extra = PassEvidence(cost_source="estimate")
        if i in replayed:
            cost_s, share, what = replayed[i]
            extra = PassEvidence(cost_source="replay", estimate_s=round(f.cost.seconds_per_step, 9),
                                 replay_error=error, what_if=what)
            f = replace(f, cost=Cost(cost_s, share))
        elif any(i == j for j, _ in targets):
            extra["cost_note"] = _why_estimate(fit)
        out.append(replace(f, evidence={**dict(f.evidence), **extra}))
    return out


def _why_estimate(fit: ReplayFit | None) -> str:
    if fit is None or not np.isfinite(fit.error):
        return "no step could be replayed (no matched collectives inside profiler steps): the analyzer's estimate"
    return (f"the what-if replay is {100 * fit.error:.1f}% off the measured step times (over "
            f"{100 * threshold('replay.max_error'):.0f}%): the analyzer's own estimate is kept")


def _costs(analysis: Analysis, fit: ReplayFit,
           targets: list[tuple[int, Finding]]) -> dict[int, tuple[float, float, str]]:
    """Per finding index: (seconds saved per step, share of the measured step, the what-if) by sequential
    what-ifs."""
    graph = fit.graph
    step = float(fit.replay.step_times()["measured_ns"].mean())
    loc = graph.nodes["local_ns"].to_numpy(np.float64)
    tails = graph.ranks["tail_ns"].to_numpy(np.float64)
    xfer: np.ndarray | None = None
    before = fit.replay.mean_step_ns()
    out: dict[int, tuple[float, float, str]] = {}
    order = sorted(targets, key=lambda t: (Mark.OVERLAP_EXPOSED.on(t[1]), -t[1].cost.seconds_per_step))
    done: dict[int, str] = {}
    for i, f in order:
        rank = _target_rank(f)
        if rank is not None:
            if rank not in set(graph.nodes["rank"].tolist()):
                continue
            if rank in done:  # one cause, one cost: the rank's extra work is already costed
                out[i] = (0.0, 0.0, f"counted in {done[rank]}")
                continue
            loc, tails = idealize(graph, rank, loc, tails)
            done[rank] = f.key
        else:
            xfer = with_transfer(graph, _hidden_share(analysis))
        after = replay(graph, local=loc, transfer=xfer, tail=tails).mean_step_ns()
        saved = max(before - after, 0.0)
        before = min(before, after)
        what = (f"rank {rank}'s work between its collectives set to its peers' mean" if rank is not None
                else "each collective's transfer cut to its part hidden under compute")
        out[i] = (saved / 1e9, min(saved / step, 1.0) if step > 0 else 0.0, what)
    return out
