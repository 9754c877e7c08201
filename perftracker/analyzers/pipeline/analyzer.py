"""Pipeline findings: the schedule and its bubbles, a stage heavier than the others, bubbles beyond the ideal.

`analyze_pipeline(analysis)`: an info on the layout and schedule, the stage-imbalance warning (what a balanced
split saves, by `schedule_sim.simulate`), and bubbles beyond the ideal (only without an imbalance).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.layout.model import Layout
from perftracker.analyzers.layout.views import parallel_layout_view
from perftracker.analyzers.pipeline.schedule_sim import ideal_bubble, recognize, simulate
from perftracker.analyzers.pipeline.views import stage_compute_view, stage_steps_view
from perftracker.analyzers.stragglers.significance import paired_p
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.steps import PipelineEvidence

BACKWARD_PER_FORWARD = 2.0  # a backward pass costs about twice its forward (the usual rule for dense layers)


def _paired(grid: pd.DataFrame, heavy: int) -> tuple[float, float, int]:
    """(family-wise p, mean relative excess, trials) of the heavy stage's value over the others' median, per row
    (a step of one pipeline)."""
    others = grid.drop(columns=[heavy]).median(axis=1)
    d = (grid[heavy] - others).to_numpy(dtype=float)
    n = len(d)
    if n < 2:
        return 1.0, 0.0, n
    mean, base = float(d.mean()), float(others.mean())
    return paired_p(mean, float(d.std(ddof=1)), n, grid.shape[1]), mean / base if base > 0 else 0.0, n


def _balanced(kind: str, per_mb: list[float], m: int) -> tuple[float, float]:
    """(simulated pipeline time now, with the same total compute split evenly), in the unit of per_mb."""
    sim = "gpipe" if kind == "gpipe" else "1f1b"
    f = [c / (1 + BACKWARD_PER_FORWARD) for c in per_mb]
    b = [c - x for c, x in zip(per_mb, f, strict=True)]
    mean_f, mean_b = float(np.mean(f)), float(np.mean(b))
    p = len(per_mb)
    return simulate(sim, f, b, m), simulate(sim, [mean_f] * p, [mean_b] * p, m)


def analyze_pipeline(analysis: Analysis) -> list[Finding]:
    layout = analysis.view(parallel_layout_view)
    if layout.stages < 2:
        return []
    rows = analysis.view(stage_steps_view)
    compute = analysis.view(stage_compute_view)
    if rows.empty:
        return []
    p = layout.stages
    m = int(rows["microbatches"].median())
    seen = Counter(recognize(str(ps), int(s), p) for ps, s in zip(rows["passes"], rows["stage"], strict=True))
    kind = max([(n, k) for k, n in seen.items() if k != "unknown"], default=(0, "unknown"))[1]  # most rows' schedule
    ideal = ideal_bubble(p, m)
    bubble = rows["recv_wait_ms"] / rows["phase_ms"].where(rows["phase_ms"] > 0)
    grid = compute.pivot_table(index="step", columns="stage", values="compute_ms").dropna() if not compute.empty \
        else pd.DataFrame()
    shares = (grid.median() / grid.median().sum()) if not grid.empty else pd.Series(dtype=float)
    findings = [_summary(layout, kind, m, ideal, float(bubble.median()), shares, rows)]
    if m < 1:  # sends and receives whose direction is not told (fused send_recv kernels): no schedule to judge by
        return findings
    imbalance = _imbalance(layout, rows, grid, kind, m) if len(shares) == p else None
    if imbalance is not None:
        findings.append(imbalance)
    else:
        findings += bubble_findings(rows, bubble, ideal, p, m, kind)
    return findings


def _summary(layout: Layout, kind: str, m: int, ideal: float, bubble: float, shares: pd.Series,
             rows: pd.DataFrame) -> Finding:
    split = "/".join(f"{100 * float(s):.0f}%" for s in shares) if len(shares) else "unknown"
    return Finding(
        analyzer="pipeline", severity=Severity.INFO,
        title=(f"Pipeline {layout.summary()}: schedule {kind.upper() if kind != 'unknown' else 'not recognized'}, "
               f"{m} micro-batches; compute per stage {split}; blocked in receives {100 * bubble:.0f}% of the "
               f"pipeline phase (the schedule's ideal bubble: {100 * ideal:.0f}%)"),
        recommendation=("Context: how the pipeline runs. The layout came from " + (layout.method or "the groups")
                        + (f" ({layout.note})" if layout.note else "") + "."),
        evidence=PipelineEvidence(
            layout=layout.summary(), layout_method=layout.method, layout_confidence=layout.confidence, schedule=kind,
            microbatches=m, stages=layout.stages, replicas=layout.size("dp"), ideal_bubble=round(ideal, 3),
            bubble=round(bubble, 3), stage_compute_share=[round(float(s), 3) for s in shares],
            recv_wait_share_by_stage=_wait_shares(rows), warmup_wait_ms_by_stage=_by_stage(rows, "warmup_wait_ms"),
            cooldown_wait_ms_by_stage=_by_stage(rows, "cooldown_wait_ms"),
            recv_wait_ms_by_stage=_by_stage(rows, "recv_wait_ms")),
        key="pipeline:summary", confidence=layout.confidence,
    )


def _by_stage(rows: pd.DataFrame, column: str) -> list[float]:
    """The median of `column` per stage (over its ranks and steps), in stage order."""
    return [round(float(x), 3) for x in rows.groupby("stage")[column].median()]


def _wait_shares(rows: pd.DataFrame) -> list[float]:
    return _by_stage(rows.assign(share=rows["recv_wait_ms"] / rows["step_ms"].where(rows["step_ms"] > 0)), "share")


def _imbalance(layout: Layout, rows: pd.DataFrame, grid: pd.DataFrame, kind: str, m: int) -> Finding | None:
    medians = grid.median()
    heavy = int(str(medians.idxmax()))
    busy = rows.pivot_table(index=["step", "replica"], columns="stage", values="busy_pipe_ms").dropna()
    p_family, _, steps = _paired(busy, heavy) if heavy in busy.columns else (1.0, 0.0, 0)
    others = float(medians.drop(index=heavy).median())
    relative = float(medians[heavy]) / others - 1.0 if others > 0 else 0.0
    per_mb = [float(medians[s]) / max(m, 1) for s in sorted(medians.index)]
    sim_now, sim_bal = _balanced(kind, per_mb, m)
    saving_share = 1.0 - sim_bal / sim_now if sim_now > 0 else 0.0
    phase_ms = float(rows["phase_ms"].median())
    step_ms = float(rows.groupby("step")["step_ms"].median().median())
    saving_ms = phase_ms * saving_share
    share = saving_ms / step_ms if step_ms > 0 else 0.0
    alpha = threshold("straggler.alpha")
    if p_family > alpha or relative < threshold("pipeline.min_stage_excess") or share < threshold(
            "pipeline.min_imbalance_share"):
        return None
    total = float(medians.sum())
    heavy_share = float(medians[heavy]) / total
    neighbours = [s for s in (heavy - 1, heavy + 1) if s in medians.index]
    target = min(neighbours, key=lambda s: float(medians[s]))
    heavy_rows = rows[rows["stage"] == heavy]
    layers = float(heavy_rows["linear_per_mb"].median())
    mean = total / len(medians)
    move_share = (float(medians[heavy]) - mean) / float(medians[heavy])
    k = max(1, round(layers * move_share)) if layers > 0 else 0
    what = (f"move ~{k} of its {layers:.0f} layers (aten::linear calls per micro-batch) from stage {heavy} to stage "
            f"{target}" if k else f"move ~{100 * move_share:.0f}% of its compute from stage {heavy} to stage {target}")
    waits = _wait_shares(rows)
    light = [s for s in range(len(waits)) if s != heavy]
    waiting = ", ".join(f"stage {s} {100 * waits[s]:.0f}%" for s in light)
    ranks = tuple(layout.stage_ranks(heavy))
    severity = Severity.CRITICAL if share >= threshold("straggler.critical_cost_share") else Severity.WARNING
    return Finding(
        analyzer="pipeline", severity=severity,
        title=(f"Stage {heavy} (ranks {', '.join(map(str, ranks))}) holds {100 * heavy_share:.0f}% of the pipeline's "
               f"compute ({100 / len(medians):.0f}% would be even): the other stages wait in receives ({waiting} of "
               f"each step); a balanced split would make the step ~{fmt_ms((step_ms - saving_ms) / 1e3)} "
               f"(now {fmt_ms(step_ms / 1e3)})"),
        recommendation=(f"Rebalance the pipeline: {what} (Megatron: --decoder-first-pipeline-num-layers / "
                        "--decoder-last-pipeline-num-layers or a custom pipeline layout; torchtitan / torch.distributed"
                        ".pipelining: the split points). The embedding, head and loss sit on the first and last "
                        "stages: count them as layers when splitting."),
        evidence=PipelineEvidence({"heavy_stage": heavy, "stage_compute_share": [round(float(medians[s]) / total, 3)
                                                                for s in sorted(medians.index)],
                  "compute_per_microbatch_ms": [round(c, 3) for c in per_mb], "schedule": kind, "microbatches": m,
                  "layers_per_microbatch": layers, "move_layers": k, "move_to_stage": target,
                  "recv_wait_share_by_stage": waits, "step_ms": round(step_ms, 3),
                  "balanced_step_ms": round(step_ms - saving_ms, 3), "pipeline_phase_ms": round(phase_ms, 3),
                  "simulated_saving_share_of_phase": round(saving_share, 3),
                  "test": "heavy stage's busy time in the pipeline phase minus the others' median, paired per step and replica (one-sided t, x stages)",
                  "trials": steps, "p_family": round(p_family, 6), "excess_pct": round(100 * relative, 1)}),
        ranks=ranks, cost=Cost(saving_ms / 1e3, share), confidence=1.0 - p_family, key=f"pipeline:imbalance:{heavy}",
    )


def bubble_findings(rows: pd.DataFrame, bubble: pd.Series, ideal: float, p: int, m: int, kind: str) -> list[Finding]:
    frame = rows.assign(bubble=bubble).dropna(subset=["bubble"])
    best = frame.groupby(["step", "stage"])["bubble"].min().groupby("step").median()
    margin = threshold("pipeline.min_bubble_excess")
    if best.empty or len(best) < 2 or not bool((best - ideal >= margin).all()):
        return []
    b = float(best.median())
    phase_ms = float(rows["phase_ms"].median())
    step_ms = float(rows.groupby("step")["step_ms"].median().median())
    excess_ms = (b - ideal) * phase_ms
    k = b * m / ((1.0 - b) * (p - 1)) if b < 1 and p > 1 else float(m)
    m_new = max(m + 1, math.ceil(k * m))
    return [Finding(
        analyzer="pipeline", severity=Severity.WARNING,
        title=(f"Pipeline bubbles beyond the schedule's ideal: the stages wait in receives {100 * b:.0f}% of the "
               f"pipeline phase against {100 * ideal:.0f}% for {kind.upper()} with {p} stages and {m} micro-batches "
               f"(in all {len(best)} steps); {fmt_ms(excess_ms / 1e3)} per step"),
        recommendation=(f"Use more micro-batches: about {m_new} (same global batch, smaller micro-batches) would bring "
                        "the bubble back to today's ideal share. If that is not possible, look at the send/recv "
                        "transfers between stages (their link, NCCL_P2P settings) and at jitter in the stages' compute."),
        evidence=PipelineEvidence(bubble=round(b, 3), ideal_bubble=round(ideal, 3), steps=len(best),
                                  per_step_bubble=[round(float(x), 3) for x in best], microbatches=m,
                                  microbatches_to_hide=m_new, schedule=kind, step_ms=round(step_ms, 3)),
        cost=Cost(excess_ms / 1e3, excess_ms / step_ms if step_ms > 0 else 0.0), key="pipeline:bubbles",
        confidence=None,
    )]
