"""The what-if verdict of pipeline jobs recorded per operation (`pipeline_ops`): one finding per job.

`whatif_view` replays each job once per analysis; `analyze_whatif` turns it into one finding (one worker, the
last stage, random variation or none) costed by the replay; `whatif_workers_view` / `whatif_optypes_view`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.analyzers.whatif.ops_graph import GraphError, build
from perftracker.analyzers.whatif.ops_replay import WhatIf, whatif

ANALYZER = "whatif"
REPLAY_TOL = 0.05  # the paper drops traces whose replayed step time is more than 5% off the measured one


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
                                    f"{job.error}. The other analyses still apply.", {"job": name, "why": job.error},
                                    key=f"whatif:{name}:unbuilt"))
            continue
        findings.append(_finding(name, job, job.result))
    return findings


def _finding(name: str, job: JobWhatIf, r: WhatIf) -> Finding:
    error = job.replay_error
    evidence: dict[str, object] = {
        "job": name, "verdict": r.verdict, "slowdown_S": round(r.slowdown, 4), "waste": round(r.waste, 4),
        "step_s": round(r.step_s, 6), "ideal_step_s": round(r.ideal_s, 6), "measured_step_s": round(r.measured_s, 6),
        "M_W": round(r.m_w, 4), "M_S": round(r.m_s, 4), "variation_share": round(r.stage_mean_share, 4),
        "replay_error": round(error, 4), "cost_source": "replay", "steps": len(r.per_step),
    }
    for i, (kind, s_t) in enumerate(list(r.by_optype.items())[:3], 1):
        evidence[f"top{i}_optype"], evidence[f"top{i}_S_t"] = kind, round(s_t, 4)
    if job.dropped_steps:
        evidence["steps_left_out"] = len(job.dropped_steps)
    if job.unknown_types:
        evidence["op_types_left_out"] = ", ".join(job.unknown_types)
    confidence = 0.9 if error <= REPLAY_TOL else 0.5
    severity = Severity.WARNING if r.slowdown >= threshold("whatif.warn_slowdown") else Severity.INFO
    slow = f"S = {r.slowdown:.2f}: {100 * r.waste:.0f}% of each step is lost to stragglers"
    key = f"whatif:{name}:{r.verdict}"
    if r.slowdown < threshold("whatif.min_slowdown"):
        return Finding(ANALYZER, Severity.INFO, f"Job {name}: no straggling (S = {r.slowdown:.3f} against every op "
                       "at its ideal duration)", "Nothing to fix here.", evidence, key=key, confidence=confidence)
    if r.verdict == "one_worker":
        rank_of = {(int(d), int(s)): int(k) for d, s, k in zip(r.workers["dp_rank"], r.workers["stage"],
                                                                 r.workers["rank"])}
        where = [(d, s, rank_of[(d, s)]) for d, s in r.m_w_workers]
        evidence.update({"workers": ", ".join(f"rank {k} (stage {s}, replica {d})" for d, s, k in where),
                         "fix_saves_s": round(r.fix_workers_s, 6)})
        names = "; ".join(f"rank {k}: stage {s}, replica {d}" for d, s, k in where)
        return Finding(ANALYZER, severity, f"Job {name}: one worker slows the whole job ({names}); fix it and the "
                       f"step gets {r.fix_workers_s:.3f} s shorter ({slow}; M_W = {100 * r.m_w:.0f}%)",
                       "Check that worker's machine (GPU clocks and health, thermal throttling, CPU contention, its "
                       "NIC); every other worker waits for it at the pipeline sends and the DP collectives.",
                       evidence, ranks=tuple(k for _, _, k in where),
                       cost=Cost(r.fix_workers_s, min(r.fix_workers_s / r.step_s, 1.0)), key=key,
                       confidence=confidence)
    if r.verdict == "last_stage":
        last = int(r.workers["stage"].max())
        ranks = tuple(int(k) for k in r.workers[r.workers["stage"] == last]["rank"] if k >= 0)
        evidence.update({"stage": last, "S_stage": round(r.by_stage[last], 4), "fix_saves_s": round(r.fix_last_stage_s, 6)})
        return Finding(ANALYZER, severity, f"Job {name}: the last pipeline stage (stage {last}) is the straggler: "
                       f"stage imbalance; balanced, the step gets {r.fix_last_stage_s:.3f} s shorter ({slow}; "
                       f"M_S = {100 * r.m_s:.0f}%)",
                       f"Move layers off stage {last} (its loss and output layers make it the longest) or give the "
                       "first and last stages fewer transformer layers (Megatron "
                       "--decoder-last-pipeline-num-layers / an uneven split).", evidence, ranks=ranks,
                       cost=Cost(r.fix_last_stage_s, min(r.fix_last_stage_s / r.step_s, 1.0)), key=key,
                       confidence=confidence)
    saved = r.step_s - r.ideal_s
    return Finding(ANALYZER, severity, f"Job {name}: stragglers vary from step to step and worker to worker, no "
                   f"single worker or stage ({slow}; the top workers explain M_W = {100 * r.m_w:.0f}%, the last "
                   f"stage M_S = {100 * r.m_s:.0f}%)",
                   "Random variation of compute time: most often sequence-length imbalance across micro-batches "
                   "(balance tokens per micro-batch: pack or sort by length), or pauses such as Python garbage "
                   "collection (gc.freeze / a synchronized gc.collect).", evidence,
                   cost=Cost(saved, min(saved / r.step_s, 1.0)), key=key, confidence=confidence)
