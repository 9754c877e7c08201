"""The `waited_rank` analyzer: in an incident of `attach --watch`, the rank the others wait for, from each rank's
scheduler state through the incident's window.

Reads the `proc_states` table: each rank's main-thread state sampled through the incident's window.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import median_step_s, pct
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.online.baseline_shift import contrast_variance, family_p, share_variance
from perftracker.analyzers.online.cpu_contention import RankWindow, rank_windows
from perftracker.analyzers.stragglers.degradation import ChangePoint, change_point, job_series, spikes
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.failures import FrameShare, WaitedRankEvidence

ASLEEP, STOPPED, RUNNING, IO = "S", "Tt", "R", "D"
TOP_FRAMES = 3  # display: innermost frames of the named rank shown
_OUTSIDE = {"stopped": "it was stopped from outside (state T: SIGSTOP, a debugger, a frozen cgroup)",
            "io": "it was in uninterruptible sleep (state D: disk or other I/O)"}  # what `doing` says of T and D


@dataclass(frozen=True)
class RankStates:
    """One rank's main thread over one window: shares of its state samples."""

    rank: int
    host: str
    samples: int
    asleep: float
    stopped: float
    running: float
    io: float


def rank_states(table: pd.DataFrame, window: str) -> dict[int, RankStates]:
    """rank -> its shares in `window` ("incident" or "baseline"), for ranks with MIN_SAMPLES samples or more."""
    rows = table[table["window"] == window]
    out: dict[int, RankStates] = {}
    for rank, g in rows.groupby("rank", sort=True):
        n = len(g)
        if n < threshold_int("online.waited.min_samples"):
            continue
        states = g["state"].astype(str)
        shares = [float(states.isin(list(letters)).sum()) / n for letters in (ASLEEP, STOPPED, RUNNING, IO)]
        out[int(str(rank))] = RankStates(int(str(rank)), str(g["host"].iloc[-1]), n, *shares)
    return out


@dataclass(frozen=True)
class Waited:
    """The rank named, and the numbers it was named on."""

    rank: int
    drop: float  # the others' median asleep share minus the rank's (each less its baseline share, with one)
    others_asleep: float  # the others' median asleep share in the window
    spread: float  # max - min of the others' asleep shares in the window
    z: float
    p_family: float
    baseline: bool  # the shares were corrected by the baseline's


def _variance(state: RankStates) -> float:
    return share_variance(state.asleep, state.samples, threshold("online.waited.design_effect"))


def judge(now: dict[int, RankStates], before: dict[int, RankStates]) -> Waited | None:
    """The rank the others wait for (docs/internals/analyzers.md), or None."""
    if len(now) < 2:
        return None
    rank = min(now, key=lambda r: (now[r].asleep, r))
    others = [o for o in sorted(now) if o != rank]
    others_asleep = statistics.median(now[o].asleep for o in others)
    drop = others_asleep - now[rank].asleep
    spread = max(now[o].asleep for o in others) - min(now[o].asleep for o in others)
    variance = contrast_variance(_variance(now[rank]), [_variance(now[o]) for o in others])
    z = drop / math.sqrt(variance) if variance > 0 else 0.0
    p_family = family_p(z, len(now), threshold("online.waited.z_min"))
    if (drop < threshold("online.waited.drop_min") or others_asleep < threshold("online.waited.others_asleep_min")
            or (len(others) >= 2 and drop < threshold("online.waited.min_effect_over_spread") * spread)
            or p_family > threshold("straggler.alpha")):
        return None
    use_base = set(now) <= set(before)
    if use_base:  # the same comparison once each rank's usual share is taken out: a change, not a habit
        moved = {r: now[r].asleep - before[r].asleep for r in now}
        if min(moved, key=lambda r: (moved[r], r)) != rank:
            return None
        drop = statistics.median(moved[o] for o in others) - moved[rank]
        if drop < threshold("online.waited.drop_min"):
            return None
    return Waited(rank, drop, others_asleep, spread, z, p_family, use_base)


def _median_of_others(values: dict[int, float], rank: int) -> float:
    others = [v for r, v in values.items() if r != rank]
    return statistics.median(others) if others else 0.0


@dataclass(frozen=True)
class Doing:
    """What the named rank did instead of sleeping."""

    kind: str  # "stopped" | "io" | "waiting for a CPU" | "computing" | "running or runnable"
    text: str


def doing(rank: int, now: dict[int, RankStates], cpu: dict[int, RankWindow]) -> Doing:
    """The state the rank was in beyond the other ranks' median (docs/internals/analyzers.md)."""
    me = now[rank]
    others = {k: _median_of_others({r: getattr(s, k) for r, s in now.items()}, rank)
              for k in ("stopped", "io", "running")}
    kind = max(others, key=lambda k: (getattr(me, k) - others[k], k))
    if kind in _OUTSIDE:
        return Doing(kind, f"{_OUTSIDE[kind]} {pct(getattr(me, kind))} of the window, the other ranks "
                           f"{pct(others[kind])}")
    running = f"running or runnable {pct(me.running)} of the window, the other ranks {pct(others['running'])}"
    if rank not in cpu or len(cpu) < 2:
        return Doing("running or runnable", f"it was {running}")
    ran = _median_of_others({r: w.run_share for r, w in cpu.items()}, rank)
    waited = _median_of_others({r: w.wait_share for r, w in cpu.items()}, rank)
    if cpu[rank].wait_share - waited > cpu[rank].run_share - ran:
        return Doing("waiting for a CPU", f"it was {running}, waiting for a CPU (runnable while another task held "
                                          f"its core) {pct(cpu[rank].wait_share)} of the window against the others' "
                                          f"{pct(waited)}")
    return Doing("computing", f"it was computing while the others waited: on a CPU {pct(cpu[rank].run_share)} of "
                              f"the window (all its threads) against the others' {pct(ran)}")


def top_frames(samples: pd.DataFrame, rank: int) -> list[FrameShare]:
    """The innermost frames of `rank`'s main-thread stacks in the incident's window, most samples first."""
    if samples.empty:
        return []
    rows = samples[(samples["rank"] == rank) & samples["main"].astype(bool)]
    total = int(rows["count"].sum())
    if not total:
        return []
    counts = rows.groupby(rows["stack"].astype(str).str.rsplit(";", n=1).str[-1])["count"].sum()
    top = sorted(((str(f), int(c)) for f, c in counts.items()), key=lambda kv: (-kv[1], kv[0]))[:TOP_FRAMES]
    return [{"frame": f, "share": round(c / total, 4)} for f, c in top]


def _significant_change(analysis: Analysis) -> ChangePoint | None:
    """The degradation analyzer's change point (on the step times without their lone spikes), when significant."""
    series = job_series(analysis.store.steps)
    cp = change_point(series[~spikes(series)]) if len(series) else None
    return cp if cp is not None and cp.verdict.significant else None


def analyze_waited_rank(analysis: Analysis) -> list[Finding]:
    table = analysis.store["proc_states"]
    if table.empty:
        return []
    now, before = rank_states(table, "incident"), rank_states(table, "baseline")
    found = judge(now, before)
    if found is None:
        return []
    sched = analysis.store["cpu_sched"]
    cpu = rank_windows(sched, "incident") if not sched.empty else {}
    return [_finding(analysis, found, now, before, doing(found.rank, now, cpu), cpu)]


def _finding(analysis: Analysis, w: Waited, now: dict[int, RankStates], before: dict[int, RankStates],
             what: Doing, cpu: dict[int, RankWindow]) -> Finding:
    store = analysis.store
    cp = _significant_change(analysis)
    when = f" since step {cp.step}" if cp is not None else ""
    me = now[w.rank]
    samples = store["profile_samples"]
    frames = top_frames(samples, w.rank)
    others = [o for o in sorted(now) if o != w.rank]
    wait_frame = next((f[0]["frame"] for o in others if (f := top_frames(samples, o))), "")
    where = f" (most samples in {wait_frame})" if wait_frame else ""
    title = (f"Rank {w.rank} is the rank the others wait for{when}: its main thread was asleep {pct(me.asleep)} of "
             f"the incident's window, the other ranks {pct(w.others_asleep)} (median){where}; {what.text}")
    if frames:
        title += f"; its stacks: {frames[0]['frame']} ({pct(frames[0]['share'])})"
    advice = {
        "stopped": "Something outside the job stops this rank's process: look for a debugger or tracer attached to "
                   "it, a job-control signal (SIGSTOP/SIGTSTP: a shell, a supervisor, a checkpoint/restore tool), "
                   "or a cgroup freezer or CPU quota on its container (`cat /proc/<pid>/status`, `grep -r . "
                   "/sys/fs/cgroup/<its cgroup>/cpu.stat`).",
        "io": "This rank waits on disk or other I/O the others do not: its data shard, checkpoint or log writes; "
              "check its storage (`iostat -x 1`, `pidstat -d -p <pid> 1`) and give it prefetching or local storage.",
        "waiting for a CPU": "This rank's process wants a CPU and does not get one: other processes share its cores. "
                             "Give each rank cores of its own (a cpuset, `taskset`, Slurm `--cpu-bind`), set "
                             "OMP_NUM_THREADS and the loader's num_workers to fit, and move the neighbours.",
        "computing": "This rank does more work than the others between collectives: rank-dependent work (uneven "
                     "data or sequence lengths, extra logging or evaluation on this rank, a larger shard) or a "
                     "slower device; look at its stacks, then confirm with a trace (`perftracker attach "
                     "--trace-steps N` on a job launched with KINETO_USE_DAEMON=1 or the perftracker hook).",
    }.get(what.kind, "This rank runs while the others wait for it: check what else runs on its cores (`top`, "
                     "`pidstat -p <pid> 1`) and what it does (its stacks), then confirm with a trace.")
    evidence = WaitedRankEvidence(
        rank=w.rank, since_step=cp.step if cp is not None else None, doing=what.kind,
        asleep=round(me.asleep, 4), others_asleep=round(w.others_asleep, 4), drop=round(w.drop, 4),
        others_spread=round(w.spread, 4), baseline_subtracted=w.baseline,
        states=[{"rank": s.rank, "samples": s.samples, "asleep": round(s.asleep, 4), "stopped": round(s.stopped, 4),
                 "running": round(s.running, 4), "io": round(s.io, 4),
                 "baseline_asleep": round(before[s.rank].asleep, 4) if s.rank in before else None,
                 "cpu_run_share": round(cpu[s.rank].run_share, 4) if s.rank in cpu else None,
                 "cpu_wait_share": round(cpu[s.rank].wait_share, 4) if s.rank in cpu else None}
                for s in list(now.values())[:64]],
        top_frames=frames, others_wait_frame=wait_frame,
        method="each rank's main-thread state (/proc/<pid>/stat) sampled every 50-100 ms through the incident's "
               "stack recording: the ranks that wait for another sleep in the collective (S), the rank they "
               "wait for does not (stopped T, running or runnable R, I/O D); compared across ranks inside the "
               "window" + (", each rank's share in the healthy baseline subtracted" if w.baseline else ""),
        significance={"z": round(w.z, 2), "p_family": w.p_family, "confidence": round(1.0 - w.p_family, 4),
                      "alpha": threshold("straggler.alpha"), "design_effect": threshold("online.waited.design_effect")},
        thresholds={"drop_min": threshold("online.waited.drop_min"),
                    "others_asleep_min": threshold("online.waited.others_asleep_min"),
                    "min_effect_over_spread": threshold("online.waited.min_effect_over_spread"),
                    "min_samples": threshold_int("online.waited.min_samples")})
    step_s = median_step_s(store.steps)
    if cp is not None:
        cost = Cost(cp.after_s - cp.before_s, (cp.after_s - cp.before_s) / cp.after_s)
    else:
        cost = Cost(min(1.0, w.drop) * step_s, min(1.0, w.drop)) if step_s else Cost()
    return Finding("waited_rank", Severity.WARNING, title, advice, evidence, ranks=(w.rank,),
                   hosts=(me.host,) if me.host else (), cost=cost, confidence=1.0 - w.p_family,
                   key=f"waited_rank:{w.rank}")
