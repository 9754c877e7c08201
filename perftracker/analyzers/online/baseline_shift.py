"""The `baseline_shift` analyzer: which rank changed since the watcher's healthy baseline, and where its time went.

Reads the `baseline_profile_samples` (the watcher's healthy baseline) and `profile_samples` (the incident's)
tables.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import median_step_s, pct
from perftracker.analyzers.failures.stack_state import COLLECTIVES
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.stragglers.degradation import change_point, job_series
from perftracker.analyzers.stragglers.stack_profile import deepest, frame_shares
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.failures import BaselineShiftEvidence, OtherWaiting
from perftracker.store import Store

_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]+):-?\d+\)$")


def is_wait_frame(frame: str) -> bool:
    """Is this py-spy frame ("function (file:line)") where a rank may wait for the others?"""
    m = _FRAME.match(frame)
    if m is None:
        return False
    name, file = m.group("name").rsplit(".", 1)[-1], m.group("file")
    if file.endswith("distributed_c10d.py") and name in COLLECTIVES:
        return True
    if "distributed" in file and name == "wait":
        return True
    return name == "_engine_run_backward" and file.endswith("autograd/graph.py")


@dataclass(frozen=True)
class WindowProfile:
    """One rank's main thread over one window."""

    samples: int
    waiting: float  # share of samples inside a wait frame
    wait_frame: str  # the innermost wait frame most waiting samples are in ("" when none)
    work: dict[str, float]  # frame -> share of all samples that are working and contain it
    depth: dict[str, int]


def window_profile(rows: pd.DataFrame) -> WindowProfile:
    """`rows`: one rank's main-thread rows of a `profile_samples`-like table."""
    total = int(rows["count"].sum())
    waits: dict[str, int] = {}
    working = []
    for i, (stack, count) in enumerate(zip(rows["stack"].astype(str), rows["count"])):
        inner = [f for f in stack.split(";") if is_wait_frame(f)]
        if inner:
            waits[inner[-1]] = waits.get(inner[-1], 0) + int(count)
        else:
            working.append(i)
    shares, depth, worked = frame_shares(rows.iloc[working])
    scale = worked / total if total else 0.0
    return WindowProfile(total, sum(waits.values()) / total if total else 0.0,
                         max(waits, key=lambda f: waits[f]) if waits else "",
                         {f: s * scale for f, s in shares.items()}, depth)


def window_profiles(samples: pd.DataFrame) -> dict[int, WindowProfile]:
    """rank -> its WindowProfile, for the ranks with at least MIN_SAMPLES main-thread samples."""
    main = samples[samples["main"].astype(bool)]
    out: dict[int, WindowProfile] = {}
    for rank, rows in main.groupby("rank"):
        profile = window_profile(rows)
        if profile.samples >= threshold_int("online.baseline.min_samples"):
            out[int(str(rank))] = profile
    return out


@dataclass(frozen=True)
class Change:
    """One rank's share of something (waiting, or one frame's work) before and now, against the other ranks."""

    rank: int
    what: str  # "waiting", or the frame
    before: float
    after: float
    others_before: float  # medians of the other ranks
    others_after: float
    excess: float  # the rank's change minus the other ranks' median change (signed)
    z: float
    p_family: float


def share_variance(share: float, samples: int, design_effect: float) -> float:
    """The variance of a share of `samples` samples (binomial, times the sampler's design effect)."""
    p = min(max(share, 1.0 / samples), 1.0 - 1.0 / samples)
    return design_effect * p * (1.0 - p) / samples


def contrast_variance(own: float, others: list[float]) -> float:
    """The variance of one rank's value minus the median of the others' (that median's: about pi / 2n times
    their mean variance)."""
    if not others:
        return own
    spread = statistics.mean(others)
    return own + (spread if len(others) == 1 else spread * math.pi / (2 * len(others)))


def family_p(z: float, tests: int, z_min: float) -> float:
    """The one-sided p of `z`, times the `tests` made (1 below `z_min`)."""
    if z < z_min:
        return 1.0
    return min(1.0, 0.5 * math.erfc(z / math.sqrt(2.0)) * max(tests, 1))


Windows = tuple[dict[int, WindowProfile], dict[int, WindowProfile]]
Share = Callable[[WindowProfile], float]


def _work_share(frame: str) -> Share:
    return lambda profile: profile.work.get(frame, 0.0)


def _change(rank: int, what: str, share: Share, windows: Windows, tests: int) -> Change:
    before, after = windows
    others = [o for o in sorted(after) if o != rank]
    b, a = share(before[rank]), share(after[rank])
    deltas = [share(after[o]) - share(before[o]) for o in others]
    excess = a - b - (statistics.median(deltas) if deltas else 0.0)

    def var(r: int) -> float:
        effect = threshold("online.baseline.design_effect")
        return (share_variance(share(before[r]), before[r].samples, effect)
                + share_variance(share(after[r]), after[r].samples, effect))

    z = abs(excess) / math.sqrt(contrast_variance(var(rank), [var(o) for o in others]))
    if len(deltas) >= 2 and abs(excess) < threshold("straggler.min_effect_over_spread") * (max(deltas) - min(deltas)):
        z = 0.0
    return Change(rank, what, b, a, statistics.median(share(before[o]) for o in others) if others else b,
                  statistics.median(share(after[o]) for o in others) if others else b, excess, z,
                  family_p(z, tests, threshold("online.baseline.z_min")))


def stopped_waiting(windows: Windows) -> list[Change]:
    """The ranks whose waiting share fell against the others' while the others wait more (see the docstring)."""
    ranks = sorted(windows[1])
    found = []
    for r in ranks:
        c = _change(r, "waiting", lambda p: p.waiting, windows, len(ranks))
        if (c.excess <= -threshold("online.baseline.excess") and c.others_after - c.others_before >= threshold("online.baseline.excess") / 2 and c.p_family <= threshold("straggler.alpha")):
            found.append(c)
    return found


def moved_work(windows: Windows) -> list[Change]:
    """Every (rank, frame) pair whose working share rose beyond the others' (docs/internals/analyzers.md)."""
    before, after = windows
    ranks = sorted(after)
    frames = sorted({f for r in ranks for f in (*before[r].work, *after[r].work)})
    tests = len(frames) * len(ranks)
    found = []
    for r in ranks:
        for f in frames:
            b, a = before[r].work.get(f, 0.0), after[r].work.get(f, 0.0)
            if a - b < threshold("online.baseline.excess") or a < threshold("online.baseline.ratio") * b:
                continue
            c = _change(r, f, _work_share(f), windows, tests)
            if c.excess >= threshold("online.baseline.excess") and c.p_family <= threshold("straggler.alpha"):
                found.append(c)
    return found


def _top_frame(changes: list[Change], depth: dict[str, int]) -> Change:
    """The deepest frame (of the job's own code first) among those whose share rose nearly the most on the rank
    itself (its own rise: an ancestor frame's excess also holds the other ranks' fall into waiting)."""
    top = max(c.after - c.before for c in changes)
    near = {c.what: c.after - c.before for c in changes if c.after - c.before >= threshold("stack_profile.near_max") * top}
    where = deepest(near, depth, user_only=True) or deepest(near, depth, user_only=False) or changes[0].what
    return next(c for c in changes if c.what == where)


def _where_time_went(rank: int, windows: Windows) -> Change | None:
    """The frame of the rank's own work that rose most against the others (significant or not)."""
    before, after = windows
    frames = {f for f in (*before[rank].work, *after[rank].work)}
    rises = [_change(rank, f, _work_share(f), windows, 1) for f in sorted(frames)]
    rises = [c for c in rises if c.excess > 0 and c.after > c.before]
    return _top_frame(rises, after[rank].depth) if rises else None


def _windows(store: Store) -> Windows:
    """(baseline, incident) profiles of the ranks with enough samples in both ({} and {} when a window is empty)."""
    base, now = store["baseline_profile_samples"], store["profile_samples"]
    if base.empty or now.empty:
        return {}, {}
    before, after = window_profiles(base), window_profiles(now)
    common = sorted(set(before) & set(after))
    return {r: before[r] for r in common}, {r: after[r] for r in common}


def judgeable(analysis: Analysis) -> bool:
    """Two ranks or more with enough samples in both the baseline and the incident's window."""
    return len(_windows(analysis.store)[1]) >= 2


def analyze_baseline_shift(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    windows = _windows(store)
    common = sorted(windows[1])
    if not common:
        return []
    waits = {c.rank: c for c in stopped_waiting(windows)}
    work: dict[int, list[Change]] = {}
    for c in moved_work(windows):
        work.setdefault(c.rank, []).append(c)
    named = sorted(set(waits) | set(work))
    if not named or (len(common) >= 3 and 2 * len(named) > len(common)):
        return []
    series = job_series(store.steps)
    cp = change_point(series) if len(series) else None
    since = cp.step if cp is not None and cp.verdict.significant else None
    step_s = median_step_s(store.steps)
    return [_finding(r, waits.get(r), work.get(r, []), windows, since, step_s, _hosts(store["profile_samples"], r),
                     len(common)) for r in named]


def _hosts(samples: pd.DataFrame, rank: int) -> tuple[str, ...]:
    return tuple(sorted({str(h) for h in samples.loc[samples["rank"] == rank, "host"].dropna() if str(h)}))


def _finding(rank: int, wait: Change | None, work: list[Change], windows: Windows, since: int | None,
             step_s: float, hosts: tuple[str, ...], ranks: int) -> Finding:
    before, after = windows
    moved = _top_frame(work, after[rank].depth) if work else _where_time_went(rank, windows)
    others = [o for o in sorted(after) if o != rank]
    when = f" since step {since}" if since is not None else " since the baseline"
    parts = []
    if moved is not None and (work or wait is None):
        parts.append(f"{pct(moved.after)} of samples now in {moved.what}, {pct(moved.before)} in the baseline "
                     f"(the other ranks {pct(moved.others_before)} -> {pct(moved.others_after)})")
    waiting_records: list[OtherWaiting] = [{"rank": o, "frame": after[o].wait_frame, "waiting_before": round(before[o].waiting, 4),
                        "waiting_after": round(after[o].waiting, 4)} for o in others]
    if wait is not None:
        who = ", ".join(f"rank {o} {pct(before[o].waiting)} -> {pct(after[o].waiting)}" for o in others[:4])
        frame = next((after[o].wait_frame for o in others if after[o].wait_frame), "")
        parts.append(f"the other ranks now wait for it{f' in {frame}' if frame else ''} ({who} of samples; rank "
                     f"{rank} {pct(wait.before)} -> {pct(wait.after)})")
        if moved is not None and not work and moved.after - moved.before >= threshold("online.baseline.notable"):
            parts.append(f"its own time now in {moved.what} ({pct(moved.before)} -> {pct(moved.after)})")
        elif not work:
            parts.append("its own profile barely moved (slowed as a whole: descheduled, a CPU shared, throttled)")
    title = f"Rank {rank}{when}: " + "; ".join(parts)
    tests = [c for c in (wait, *work) if c is not None]
    confidence = 1.0 - min(c.p_family for c in tests)
    where = moved.what if moved is not None else "its own work"
    rec = (f"Rank {rank} changed since the healthy baseline{when} and the others wait for it: look at what it "
           f"does in {where} (rank-dependent work, a slower data loader or input shard, a CPU shared with other "
           "processes or descheduled: check its affinity and the host's load, or a slower device). Confirm with a "
           "trace: `perftracker attach --trace-steps N` on a job launched with KINETO_USE_DAEMON=1 or the "
           "perftracker hook.")
    best = max(tests, key=lambda c: c.z)
    evidence = BaselineShiftEvidence(
        rank=rank, since_step=since, frame=moved.what if moved is not None else "",
        share_before=round(moved.before, 4) if moved is not None else None,
        share_after=round(moved.after, 4) if moved is not None else None,
        others_share_before=round(moved.others_before, 4) if moved is not None else None,
        others_share_after=round(moved.others_after, 4) if moved is not None else None,
        waiting_before=round(before[rank].waiting, 4), waiting_after=round(after[rank].waiting, 4),
        other_ranks_waiting=waiting_records[:16],
        moved_frames=[{"frame": c.what, "share_before": round(c.before, 4), "share_after": round(c.after, 4),
                       "excess": round(c.excess, 4)} for c in sorted(work, key=lambda c: -c.excess)[:8]],
        samples_before=before[rank].samples, samples_after=after[rank].samples, ranks_compared=ranks,
        method="py-spy record of every rank side by side: the incident's window against the baseline window "
               "recorded when the watch armed; each change on this rank minus its median change on the others",
        significance={"test": "stopped waiting" if wait is not None else "own work moved",
                      "z": round(best.z, 2), "p_family": best.p_family, "confidence": round(confidence, 4),
                      "alpha": threshold("straggler.alpha"), "design_effect": threshold("online.baseline.design_effect")})
    share = abs(best.excess)
    cost = Cost(seconds_per_step=share * step_s, share_of_step=share) if step_s else Cost()
    return Finding("baseline_shift", Severity.WARNING, title, rec, evidence, ranks=(rank,), hosts=hosts, cost=cost,
                   confidence=confidence, key=f"baseline_shift:{rank}")
