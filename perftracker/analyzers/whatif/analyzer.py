"""The what-if replay and verdict of pipeline jobs recorded per operation (`pipeline_ops`): one finding per job.

`replay(graph, dur, transfer)` replays every (step, replica) column at once; `whatif(graph)` computes T, T_ideal,
S, S_t, S_w, M_W, M_S and the verdict as the paper defines them (OSDI'25, Eq. 1-5). `whatif_view` replays each
job once per analysis; `analyze_whatif` turns it into one finding (one worker, the last stage, random variation or
none) costed by the replay; `whatif_workers_view` / `whatif_optypes_view`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.stepgraph.dag import finish
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.whatif.ops_graph import (
    COMM_TYPES,
    OPTIMIZER,
    P2P,
    GraphError,
    OpsGraph,
    build,
    step_max,
)
from perftracker.evidence.steps import WhatifEvidence

ANALYZER = "whatif"
_TOPS: tuple[tuple[Literal["top1_optype", "top2_optype", "top3_optype"],
                   Literal["top1_S_t", "top2_S_t", "top3_S_t"]], ...] = (  # the evidence keys of the 3 costliest op types
    ("top1_optype", "top1_S_t"), ("top2_optype", "top2_S_t"), ("top3_optype", "top3_S_t"))
REPLAY_TOL = 0.05  # the paper drops traces whose replayed step time is more than 5% off the measured one
TOP_WORKERS_PCT = 3  # M_W's "top 3% of workers" (the paper's choice)
MAX_EXACT_WORKERS = 256  # above: S_w only as the heatmap score (one replay per worker would dominate the time)


@dataclass(frozen=True)
class WhatIf:
    """The metrics of one job. Times in seconds; slowdowns are ratios to T_ideal."""

    step_s: float  # T: mean replayed step time, measured durations
    ideal_s: float  # T_ideal
    measured_s: float  # mean measured step time (first op start to last op end), for the replay's error
    slowdown: float  # S
    by_optype: dict[str, float]  # S_t
    by_dp: dict[int, float]
    by_stage: dict[int, float]
    workers: pd.DataFrame  # dp_rank, stage, rank, s_worker (exact), score (min of S_dp, S_stage)
    m_w: float
    fix_workers_s: float  # T minus the replay with the top workers (`m_w_workers`) at ideal durations
    fix_last_stage_s: float  # T minus the replay with the last stage at ideal durations
    m_w_workers: tuple[tuple[int, int], ...]  # (dp_rank, stage) of the top workers M_W fixed
    m_s: float
    stage_mean_share: float  # share of S-1 left when every op takes its (type, stage) mean: not stage imbalance
    verdict: str  # one_worker | last_stage | random_variation | none
    per_step: pd.DataFrame  # step, measured_s, replayed_s, ideal_s

    @property
    def waste(self) -> float:
        return 1.0 - 1.0 / self.slowdown if self.slowdown > 0 else 0.0


def replay(graph: OpsGraph, dur: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """Per step: the replayed step time (ns) with these durations (node x column matrices)."""
    optimizer = graph.nodes["optype"].to_numpy() == OPTIMIZER
    comm = np.zeros(len(dur), dtype=bool)
    comm[[i for members, is_comm in zip(graph.groups, graph.comm) if is_comm for i in members]] = True

    def hold(g: int, start: np.ndarray) -> np.ndarray:
        return step_max(start, graph.n_steps, graph.n_dp) if graph.sync[g] else start

    end = np.array(finish(graph.groups, graph.deps, np.where(comm[:, None], transfer, dur), np.zeros(dur.shape[1]),
                          hold))
    last = (end[optimizer] if optimizer.any() else end).max(axis=0)
    per_step: np.ndarray = last.reshape(graph.n_steps, graph.n_dp).max(axis=1)
    return per_step


def ideal(graph: OpsGraph, by_stage: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every op at its type's ideal duration: mean for compute, median for communication (the paper's); with
    `by_stage`, its (type, stage)'s (the stage imbalance kept, the variation removed; compute keeps its transfer's
    mean)."""
    dur, transfer = graph.dur.copy(), graph.transfer.copy()
    keys = graph.nodes["optype"].astype(str)
    for key, rows in graph.nodes.groupby(keys + "@" + graph.nodes["stage"].astype(str) if by_stage else keys).groups.items():
        idx = np.asarray(rows)
        if str(key).split("@", 1)[0] in COMM_TYPES:
            dur[idx], transfer[idx] = np.median(graph.dur[idx]), np.median(graph.transfer[idx])
        else:
            dur[idx], transfer[idx] = graph.dur[idx].mean(), graph.transfer[idx].mean() if by_stage else 0.0
    return dur, transfer


def optype_family(kind: str) -> str:
    """The op type S_t is reported under (the artifact folds send/recv into one P2P family per direction)."""
    return kind.split("-")[0] + "-pp-comm" if kind in P2P else kind


def whatif(graph: OpsGraph, ranks: pd.DataFrame | None = None) -> WhatIf:
    """The job's metrics (docs/internals/stepgraph.md). `ranks`: dp_rank, stage, rank (global rank per worker)."""
    ideal_dur, ideal_xfer = ideal(graph)
    t_steps = replay(graph, graph.dur, graph.transfer)
    ideal_steps = replay(graph, ideal_dur, ideal_xfer)
    t, t_ideal = float(t_steps.mean()), float(ideal_steps.mean())

    def with_ideal(block: np.ndarray) -> float:
        """Mean step time with the (nodes x cols) `block` at its ideal durations, the rest measured."""
        return float(replay(graph, np.where(block, ideal_dur, graph.dur), np.where(block, ideal_xfer, graph.transfer)).mean())

    def mixed(node_mask: np.ndarray, col_mask: np.ndarray) -> float:
        """Mean step time with only the (nodes x cols) block measured, the rest ideal."""
        return with_ideal(~np.outer(node_mask, col_mask))

    all_nodes = np.ones(len(graph.nodes), dtype=bool)
    all_cols = np.ones(len(graph.cols), dtype=bool)
    dp_col = graph.cols["dp_rank"].to_numpy()
    stages = graph.stages
    family = graph.nodes["optype"].astype(str).map(optype_family).to_numpy()
    by_optype = {str(f): mixed(family == f, all_cols) / t_ideal for f in sorted(set(family))}
    by_dp = {d: mixed(all_nodes, dp_col == d) / t_ideal for d in range(graph.n_dp)}
    stage_ids = sorted({int(s) for s in stages})
    by_stage = {s: mixed(stages == s, all_cols) / t_ideal for s in stage_ids}
    rows = []
    exact_each = graph.n_dp * len(stage_ids) <= MAX_EXACT_WORKERS
    for d in range(graph.n_dp):
        for s in stage_ids:
            exact = mixed(stages == s, dp_col == d) / t_ideal if exact_each else float("nan")
            rows.append({"dp_rank": d, "stage": s, "s_worker": exact,
                         "score": min(by_dp[d], by_stage[s])})
    workers = pd.DataFrame(rows)
    workers["rank"] = _global_ranks(workers, ranks)
    spread = t - t_ideal
    n_top = max(1, math.ceil(len(workers) * TOP_WORKERS_PCT / 100))
    top = workers.assign(neg_rank=-workers["rank"]).sort_values(["score", "neg_rank"], ascending=False).head(n_top)
    fixed = np.zeros((len(graph.nodes), len(graph.cols)), dtype=bool)
    for d, st in zip(top["dp_rank"], top["stage"]):
        fixed |= np.outer(stages == st, dp_col == d)
    t_rem_w = with_ideal(fixed)
    t_rem_s = with_ideal(np.outer(stages == max(stage_ids), all_cols))
    m_w = (t - t_rem_w) / spread if spread > 0 else 0.0
    m_s = (t - t_rem_s) / spread if spread > 0 else 0.0
    t_stage_means = float(replay(graph, *ideal(graph, by_stage=True)).mean())
    slow = t / t_ideal if t_ideal > 0 else 1.0
    left = (t - t_stage_means) / spread if spread > 0 else 0.0
    per_step = pd.DataFrame({"step": graph.cols["step"].to_numpy()[:: graph.n_dp],
                             "measured_s": graph.measured / 1e9, "replayed_s": t_steps / 1e9,
                             "ideal_s": ideal_steps / 1e9})
    return WhatIf(t / 1e9, t_ideal / 1e9, float(graph.measured.mean()) / 1e9, slow, dict(sorted(by_optype.items(), key=lambda kv: -kv[1])),
                  by_dp, by_stage, workers, m_w, (t - t_rem_w) / 1e9, (t - t_rem_s) / 1e9, tuple(zip(top["dp_rank"].tolist(), top["stage"].tolist())), m_s,
                  left, _verdict(slow, m_w, m_s, left), per_step)


def _verdict(s: float, m_w: float, m_s: float, left: float) -> str:
    if s < 1.0 + 1e-3:
        return "none"
    if m_w >= threshold("whatif.verdict_share"):
        return "one_worker"
    if m_s >= threshold("whatif.verdict_share") and left < threshold("whatif.random_share"):
        return "last_stage"
    return "random_variation"


def _global_ranks(workers: pd.DataFrame, ranks: pd.DataFrame | None) -> np.ndarray:
    if ranks is None or ranks.empty:
        return np.full(len(workers), -1, dtype=np.int64)
    lookup = ranks.drop_duplicates(["dp_rank", "stage"]).set_index(["dp_rank", "stage"])["rank"]
    idx = pd.MultiIndex.from_frame(workers[["dp_rank", "stage"]])
    return lookup.reindex(idx).fillna(-1).to_numpy(np.int64)


@dataclass(frozen=True)
class JobWhatIf:
    """One job's what-if, or why it could not be replayed."""

    job: str
    result: WhatIf | None
    error: str
    dropped_steps: tuple[int, ...]
    unknown_types: tuple[str, ...]

    @property
    def replay_error(self) -> float:
        r = self.result
        return abs(r.step_s - r.measured_s) / r.measured_s if r is not None and r.measured_s > 0 else float("nan")


def whatif_view(analysis: Analysis) -> dict[str, JobWhatIf]:
    """Per job of `pipeline_ops`: its `JobWhatIf`."""
    ops = analysis.store["pipeline_ops"]
    out: dict[str, JobWhatIf] = {}
    if ops.empty:
        return out
    for job, rows in ops.groupby("job", observed=True, sort=True):
        try:
            graph = build(rows)
        except GraphError as exc:
            out[str(job)] = JobWhatIf(str(job), None, str(exc), (), ())
            continue
        result = whatif(graph, rows[["dp_rank", "stage", "rank"]])
        out[str(job)] = JobWhatIf(str(job), result, "", graph.dropped_steps, graph.unknown)
    return out


def whatif_workers_view(analysis: Analysis) -> pd.DataFrame:
    """Per job and worker: dp_rank, stage, rank, S_w (only that worker measured) and the heatmap score."""
    frames = [j.result.workers.assign(job=name) for name, j in analysis.view(whatif_view).items() if j.result]
    cols = ["job", "dp_rank", "stage", "rank", "s_worker", "score"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def whatif_optypes_view(analysis: Analysis) -> pd.DataFrame:
    """Per job and op type: S_t (only that type at its measured durations, over T_ideal)."""
    rows = [{"job": name, "optype": t, "s_t": s} for name, j in analysis.view(whatif_view).items() if j.result
            for t, s in j.result.by_optype.items()]
    return pd.DataFrame(rows, columns=["job", "optype", "s_t"])


def analyze_whatif(analysis: Analysis) -> list[Finding]:
    findings = []
    for name, job in analysis.view(whatif_view).items():
        if job.result is None:
            findings.append(Finding(ANALYZER, Severity.INFO, f"Job {name}: the what-if replay could not be built",
                                    f"{job.error}. The other analyses still apply.", WhatifEvidence(job=name, why=job.error),
                                    key=f"whatif:{name}:unbuilt"))
            continue
        findings.append(_finding(name, job, job.result))
    return findings


def _finding(name: str, job: JobWhatIf, r: WhatIf) -> Finding:
    error = job.replay_error
    evidence: WhatifEvidence = {
        "job": name, "verdict": r.verdict, "slowdown_S": round(r.slowdown, 4), "waste": round(r.waste, 4),
        "step_s": round(r.step_s, 6), "ideal_step_s": round(r.ideal_s, 6), "measured_step_s": round(r.measured_s, 6),
        "M_W": round(r.m_w, 4), "M_S": round(r.m_s, 4), "variation_share": round(r.stage_mean_share, 4),
        "replay_error": round(error, 4), "cost_source": "replay", "steps": len(r.per_step),
    }
    for (type_key, s_key), (kind, s_t) in zip(_TOPS, r.by_optype.items()):
        evidence[type_key], evidence[s_key] = kind, round(s_t, 4)
    if job.dropped_steps:
        evidence["steps_left_out"] = len(job.dropped_steps)
    if job.unknown_types:
        evidence["op_types_left_out"] = ", ".join(job.unknown_types)
    confidence = 0.9 if error <= REPLAY_TOL else 0.5
    severity = Severity.WARNING if r.slowdown >= threshold("whatif.warn_slowdown") else Severity.INFO
    slow = f"S = {r.slowdown:.2f}: {100 * r.waste:.0f}% of each step is lost to stragglers"

    def finding(severity: Severity, title: str, advice: str, saved: float | None = None,
                ranks: tuple[int, ...] = ()) -> Finding:
        cost = Cost() if saved is None else Cost(saved, min(saved / r.step_s, 1.0))
        return Finding(ANALYZER, severity, title, advice, evidence, ranks=ranks, cost=cost,
                       key=f"whatif:{name}:{r.verdict}", confidence=confidence)

    if r.slowdown < threshold("whatif.min_slowdown"):
        return finding(Severity.INFO, f"Job {name}: no straggling (S = {r.slowdown:.3f} against every op at its "
                       "ideal duration)", "Nothing to fix here.")
    if r.verdict == "one_worker":
        rank_of = {(int(d), int(s)): int(k) for d, s, k in zip(r.workers["dp_rank"], r.workers["stage"],
                                                                 r.workers["rank"])}
        where = [(d, s, rank_of[(d, s)]) for d, s in r.m_w_workers]
        evidence.update({"workers": ", ".join(f"rank {k} (stage {s}, replica {d})" for d, s, k in where),
                         "fix_saves_s": round(r.fix_workers_s, 6)})
        names = "; ".join(f"rank {k}: stage {s}, replica {d}" for d, s, k in where)
        return finding(severity, f"Job {name}: one worker slows the whole job ({names}); fix it and the "
                       f"step gets {r.fix_workers_s:.3f} s shorter ({slow}; M_W = {100 * r.m_w:.0f}%)",
                       "Check that worker's machine (GPU clocks and health, thermal throttling, CPU contention, its "
                       "NIC); every other worker waits for it at the pipeline sends and the DP collectives.",
                       r.fix_workers_s, tuple(k for _, _, k in where))
    if r.verdict == "last_stage":
        last = int(r.workers["stage"].max())
        ranks = tuple(int(k) for k in r.workers[r.workers["stage"] == last]["rank"] if k >= 0)
        evidence.update({"stage": last, "S_stage": round(r.by_stage[last], 4), "fix_saves_s": round(r.fix_last_stage_s, 6)})
        return finding(severity, f"Job {name}: the last pipeline stage (stage {last}) is the straggler: "
                       f"stage imbalance; balanced, the step gets {r.fix_last_stage_s:.3f} s shorter ({slow}; "
                       f"M_S = {100 * r.m_s:.0f}%)",
                       f"Move layers off stage {last} (its loss and output layers make it the longest) or give the "
                       "first and last stages fewer transformer layers (Megatron "
                       "--decoder-last-pipeline-num-layers / an uneven split).", r.fix_last_stage_s, ranks)
    return finding(severity, f"Job {name}: stragglers vary from step to step and worker to worker, no "
                   f"single worker or stage ({slow}; the top workers explain M_W = {100 * r.m_w:.0f}%, the last "
                   f"stage M_S = {100 * r.m_s:.0f}%)",
                   "Random variation of compute time: most often sequence-length imbalance across micro-batches "
                   "(balance tokens per micro-batch: pack or sort by length), or pauses such as Python garbage "
                   "collection (gc.freeze / a synchronized gc.collect).", r.step_s - r.ideal_s)
