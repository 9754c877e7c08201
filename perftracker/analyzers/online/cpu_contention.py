"""The `cpu_contention` analyzer: ranks that waited for a CPU during an incident, more than in the healthy baseline."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import median_step_s, rank_list
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.failures import CpuContentionEvidence


@dataclass(frozen=True)
class RankWindow:
    """One rank's process over one window: shares of the window's wall time."""

    host: str
    rank: int
    wall_s: float
    wait_share: float
    run_share: float
    load1: float
    cpus: int


def rank_windows(sched: pd.DataFrame, window: str) -> dict[int, RankWindow]:
    """Per rank, its process's first and last snapshot of `window` ("incident" or "baseline")."""
    rows = sched[sched["window"] == window].sort_values("ts_ns", kind="stable")
    out: dict[int, RankWindow] = {}
    for _, g in rows.groupby(["rank", "pid"], sort=True):
        first, last = g.iloc[0], g.iloc[-1]
        rank = int(last["rank"])
        wall_ns = int(last["ts_ns"]) - int(first["ts_ns"])
        if wall_ns < threshold("online.cpu.min_window_s") * 1e9:
            continue
        wait = max(0, int(last["wait_ns"]) - int(first["wait_ns"])) / wall_ns
        run = max(0, int(last["run_ns"]) - int(first["run_ns"])) / wall_ns
        out[rank] = RankWindow(str(last["host"]), rank, wall_ns / 1e9, wait, run,
                                    float(last["load1"]), int(last["cpus"]))
    return out


def _contended(now: RankWindow, before: RankWindow | None) -> bool:
    if now.wait_share < threshold("online.cpu.wait_share_min"):
        return False
    if before is None:
        return now.wait_share >= threshold("online.cpu.no_baseline_min")
    return now.wait_share - before.wait_share >= threshold("online.cpu.rise_min")


def analyze_cpu_contention(analysis: Analysis) -> list[Finding]:
    sched = analysis.store["cpu_sched"]
    if sched.empty:
        return []
    now, before = rank_windows(sched, "incident"), rank_windows(sched, "baseline")
    step_s = median_step_s(analysis.store.steps)
    findings = []
    for host in sorted({w.host for w in now.values()}):
        hit = sorted(r for r, w in now.items() if w.host == host and _contended(w, before.get(r)))
        if hit:
            findings.append(_finding(host, [now[r] for r in hit], before, step_s))
    return findings


def _finding(host: str, hit: list[RankWindow], before: dict[int, RankWindow], step_s: float) -> Finding:
    ranks = [w.rank for w in hit]
    share = sum(w.wait_share for w in hit) / len(hit)
    compared = [before[w.rank] for w in hit if w.rank in before]
    was = sum(w.wait_share for w in compared) / len(compared) if compared else None
    last = hit[-1]
    load = f"; load average {last.load1:.1f} on {last.cpus} CPU(s) the job may use" if last.cpus > 0 else ""
    title = (f"CPU contention on {host}: rank{'s' if len(ranks) > 1 else ''} {rank_list(ranks)} waited for a CPU "
             f"{100 * share:.0f}% of the incident's window" +
             (f" ({100 * was:.0f}% in the healthy baseline)" if was is not None else " (no healthy baseline to compare)")
             + load)
    rec = (f"Something else takes the job's cores on {host}: list what runs there (`top -o %CPU`, `ps -eo "
           "pid,pcpu,comm --sort=-pcpu | head`), then give the job cores of its own (a cpuset cgroup, `taskset`, "
           "Slurm `--exclusive` / `--cpu-bind`, Kubernetes guaranteed QoS with integer CPUs) or move the "
           "neighbours; if they are the job's own threads (data loader workers, OMP/MKL threads beyond the cores "
           "each rank has), set OMP_NUM_THREADS and the loader's num_workers to fit.")
    evidence = CpuContentionEvidence(
        ranks=[{"rank": w.rank, "wait_share": round(w.wait_share, 4), "run_share": round(w.run_share, 4),
                "window_s": round(w.wall_s, 2),
                "baseline_wait_share": round(before[w.rank].wait_share, 4) if w.rank in before else None,
                "baseline_run_share": round(before[w.rank].run_share, 4) if w.rank in before else None}
               for w in hit],
        load1=last.load1, cpus=last.cpus,
        method="the kernel's scheduler accounting (/proc/<pid>/task/*/schedstat: time runnable but waiting on a "
               "run queue), summed over each rank's threads, at the start and end of the incident's and the "
               "baseline's stack recording",
        thresholds={"wait_share_min": threshold("online.cpu.wait_share_min"),
                    "rise_min": threshold("online.cpu.rise_min"), "no_baseline_min": threshold("online.cpu.no_baseline_min")})
    cost = Cost(seconds_per_step=share * step_s, share_of_step=min(1.0, share)) if step_s else Cost()
    return Finding("cpu_contention", Severity.WARNING, title, rec, evidence, ranks=tuple(ranks), hosts=(host,),
                   cost=cost, key=f"cpu_contention:{host}")
