"""What-if replay of a pipeline-parallel job on its real dependencies, and the OSDI'25 slowdown metrics.

`replay(graph, dur, transfer)` replays every (step, replica) column at once; `whatif(graph)` computes T, T_ideal,
S, S_t, S_w, M_W, M_S and the verdict as the paper defines them (OSDI'25, Eq. 1-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.whatif.ops_graph import COMM_TYPES, OPTIMIZER, OpsGraph, step_max

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
    end = np.zeros_like(dur)
    deps = graph.deps
    n_cols = dur.shape[1]
    optimizer = graph.nodes["optype"].to_numpy() == OPTIMIZER
    for members, is_comm, is_sync in zip(graph.groups, graph.comm, graph.sync):
        before = [j for i in members for j in deps[i]]
        start = end[before].max(axis=0) if before else np.zeros(n_cols)
        if is_sync:
            start = step_max(start, graph.n_steps, graph.n_dp)
        idx = list(members)
        end[idx] = start + (transfer[idx] if is_comm else dur[idx])
    finish = end[optimizer].max(axis=0) if optimizer.any() else end.max(axis=0)
    per_step: np.ndarray = finish.reshape(graph.n_steps, graph.n_dp).max(axis=1)
    return per_step


def ideal(graph: OpsGraph) -> tuple[np.ndarray, np.ndarray]:
    """Every op at its type's ideal duration: mean for compute, median for communication (the paper's)."""
    dur, transfer = graph.dur.copy(), graph.transfer.copy()
    for kind, rows in graph.nodes.groupby("optype").groups.items():
        idx = np.asarray(rows)
        if str(kind) in COMM_TYPES:
            dur[idx] = np.median(graph.dur[idx])
            transfer[idx] = np.median(graph.transfer[idx])
        else:
            dur[idx] = graph.dur[idx].mean()
            transfer[idx] = 0.0
    return dur, transfer


def _stage_means(graph: OpsGraph) -> tuple[np.ndarray, np.ndarray]:
    """Every op at its (type, stage)'s ideal duration: the stage imbalance kept, the variation removed."""
    dur, transfer = graph.dur.copy(), graph.transfer.copy()
    keys = graph.nodes["optype"].astype(str) + "@" + graph.nodes["stage"].astype(str)
    for key, rows in graph.nodes.groupby(keys).groups.items():
        kind = str(key).split("@", 1)[0]
        idx = np.asarray(rows)
        if kind in COMM_TYPES:
            dur[idx], transfer[idx] = np.median(graph.dur[idx]), np.median(graph.transfer[idx])
        else:
            dur[idx], transfer[idx] = graph.dur[idx].mean(), graph.transfer[idx].mean()
    return dur, transfer


def optype_family(kind: str) -> str:
    """The op type S_t is reported under (the artifact folds send/recv into one P2P family per direction)."""
    if kind in ("forward-send", "forward-recv"):
        return "forward-pp-comm"
    if kind in ("backward-send", "backward-recv"):
        return "backward-pp-comm"
    return kind


def whatif(graph: OpsGraph, ranks: pd.DataFrame | None = None) -> WhatIf:
    """The job's metrics (docs/internals/stepgraph.md). `ranks`: dp_rank, stage, rank (global rank per worker)."""
    ideal_dur, ideal_xfer = ideal(graph)
    t_steps = replay(graph, graph.dur, graph.transfer)
    ideal_steps = replay(graph, ideal_dur, ideal_xfer)
    t, t_ideal = float(t_steps.mean()), float(ideal_steps.mean())

    def mixed(node_mask: np.ndarray, col_mask: np.ndarray, base_measured: bool) -> float:
        """Mean step time with the (nodes x cols) block measured (or ideal, when the base is measured)."""
        block = np.outer(node_mask, col_mask)
        if base_measured:
            dur = np.where(block, ideal_dur, graph.dur)
            xfer = np.where(block, ideal_xfer, graph.transfer)
        else:
            dur = np.where(block, graph.dur, ideal_dur)
            xfer = np.where(block, graph.transfer, ideal_xfer)
        return float(replay(graph, dur, xfer).mean())

    all_nodes = np.ones(len(graph.nodes), dtype=bool)
    all_cols = np.ones(len(graph.cols), dtype=bool)
    dp_col = graph.cols["dp_rank"].to_numpy()
    stages = graph.stages
    family = graph.nodes["optype"].astype(str).map(optype_family).to_numpy()
    by_optype = {str(f): mixed(family == f, all_cols, False) / t_ideal for f in sorted(set(family))}
    by_dp = {d: mixed(all_nodes, dp_col == d, False) / t_ideal for d in range(graph.n_dp)}
    stage_ids = sorted({int(s) for s in stages})
    by_stage = {s: mixed(stages == s, all_cols, False) / t_ideal for s in stage_ids}
    rows = []
    exact_each = graph.n_dp * len(stage_ids) <= MAX_EXACT_WORKERS
    for d in range(graph.n_dp):
        for s in stage_ids:
            exact = mixed(stages == s, dp_col == d, False) / t_ideal if exact_each else float("nan")
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
    t_rem_w = float(replay(graph, np.where(fixed, ideal_dur, graph.dur),
                           np.where(fixed, ideal_xfer, graph.transfer)).mean())
    block_nodes = stages == max(stage_ids)
    t_rem_s = mixed(block_nodes, all_cols, True)
    m_w = (t - t_rem_w) / spread if spread > 0 else 0.0
    m_s = (t - t_rem_s) / spread if spread > 0 else 0.0
    sm_dur, sm_xfer = _stage_means(graph)
    t_stage_means = float(replay(graph, sm_dur, sm_xfer).mean())
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
