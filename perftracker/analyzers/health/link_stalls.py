"""What the job felt while a link was down or slow: its stalled steps, the collective they waited in, its
time in communication.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.analyzers.traces.intervals import total, union
from perftracker.values import MAD_TO_SIGMA

COLLECTIVE_KINDS = ("collective_cpu", "comm")
EPOCH_NS = 10**17  # wall-clock ns (time.time_ns()) are far above this


@dataclass(frozen=True)
class Stall:
    step: int
    ranks: tuple[int, ...]  # the ranks that stalled
    world: int  # ranks with a step overlapping the window
    stall_s: float  # median over stalled ranks of (that step - the rank's median step)
    typical_step_s: float
    collective: str  # what the stalled ranks waited in (traces), "" when unknown
    phase: str  # the step-file phase that grew most, "" when unknown

    @property
    def everyone(self) -> bool:
        return len(self.ranks) == self.world

    def where(self) -> str:
        if self.collective:
            return f"in {self.collective}"
        return f"in '{self.phase}'" if self.phase else ""


def job_steps_view(analysis: Analysis) -> pd.DataFrame:
    """Every step on the wall clock (docs/internals/analyzers.md)."""
    store = analysis.store
    steps = store.steps
    columns = ["rank", "step", "start_ns", "end_ns", "dur_ns"]
    if steps.empty:
        return pd.DataFrame(columns=columns)
    files = steps[(steps["source"] == "stepfile") & (steps["start_ns"] > EPOCH_NS)]
    if not files.empty:
        out = files[["rank", "step", "start_ns", "dur_ns"]].copy()
    else:
        base = store.ranks.groupby("rank")["base_ns"].max()
        prof = steps[steps["source"] == "profiler"].copy()
        prof["base"] = prof["rank"].map(base).fillna(-1)
        prof = prof[prof["base"] > 0]
        out = prof.assign(start_ns=prof["start_ns"] + prof["base"].astype(np.int64))[["rank", "step", "start_ns",
                                                                                       "dur_ns"]]
    out = out.assign(end_ns=out["start_ns"] + out["dur_ns"])
    return out[columns].astype({"rank": np.int64, "step": np.int64}).reset_index(drop=True)


def _collective_events(analysis: Analysis) -> pd.DataFrame:
    """Collective events with wall-clock start / end (ns): rank, collective, start, end."""
    store = analysis.store
    if not store.n_events:
        return pd.DataFrame(columns=["rank", "collective", "start", "end", "step"])
    ev = store.select_events(lambda part: part["kind"].astype(str).isin(COLLECTIVE_KINDS).to_numpy(),
                             read_columns=["rank", "kind", "collective", "name", "start_ns", "dur_ns", "step"])
    base = store.ranks.groupby("rank")["base_ns"].max()
    b = ev["rank"].map(base).fillna(-1).astype(np.int64)
    ev = ev[b > 0]
    b = b[b > 0]
    name = ev["collective"].astype(str).where(ev["collective"].astype(str) != "", ev["name"].astype(str))
    return pd.DataFrame({"rank": ev["rank"].astype(np.int64), "collective": name, "start": ev["start_ns"] + b,
                         "end": ev["start_ns"] + ev["dur_ns"] + b, "step": ev["step"]})


def _collective_in(analysis: Analysis, ranks: tuple[int, ...], lo: int, hi: int) -> str:
    ev = _collective_events(analysis)
    ev = ev[ev["rank"].isin(list(ranks)) & (ev["start"] < hi) & (ev["end"] > lo)]
    if ev.empty:
        return ""
    inside = ev.assign(inside=np.minimum(ev["end"], hi) - np.maximum(ev["start"], lo))
    return str(inside.groupby("collective")["inside"].sum().idxmax())


def _phase_grown(analysis: Analysis, pairs: list[tuple[int, int]]) -> str:
    phases = analysis.store.tables["phases"]
    if phases.empty or not pairs:
        return ""
    med = phases.groupby(["rank", "phase"], observed=True)["dur_ns"].median()
    key = pd.MultiIndex.from_frame(phases[["rank", "step"]])
    picked = phases[key.isin(pairs)]
    if picked.empty:
        return ""
    excess = picked.assign(excess=picked["dur_ns"].to_numpy() - med.reindex(
        pd.MultiIndex.from_frame(picked[["rank", "phase"]])).to_numpy())
    return str(excess.groupby("phase", observed=True)["excess"].median().idxmax())


def stall_during(analysis: Analysis, start_ns: int, end_ns: int) -> Stall | None:
    """See docs/internals/analyzers.md."""
    steps = analysis.view(job_steps_view)
    if steps.empty:
        return None
    slack = threshold_int("link_stalls.slack_ns")
    lo, hi = start_ns - slack, (end_ns if end_ns >= 0 else start_ns) + slack
    stats = steps.groupby("rank")["dur_ns"].agg(["median"])
    stats["mad"] = (steps["dur_ns"] - steps["rank"].map(stats["median"])).abs().groupby(steps["rank"]).median()
    hit = steps[(steps["start_ns"] < hi) & (steps["end_ns"] > lo)]
    if hit.empty:
        return None
    longest = hit.loc[hit.groupby("rank")["dur_ns"].idxmax()]
    med = longest["rank"].map(stats["median"]).to_numpy(dtype=float)
    mad = longest["rank"].map(stats["mad"]).to_numpy(dtype=float) * MAD_TO_SIGMA
    excess = longest["dur_ns"].to_numpy(dtype=float) - med
    stalled = excess > np.maximum.reduce([med, threshold("link_stalls.mad_factor") * mad,
                                          np.full(len(med), threshold("link_stalls.min_stall_s") * 1e9)])
    if not stalled.any():
        return None
    late = longest[stalled]
    ranks = tuple(int(r) for r in late["rank"])
    step = int(late["step"].mode().iloc[0])
    window_lo, window_hi = int(late["start_ns"].min()), int(late["end_ns"].max())
    return Stall(step=step, ranks=ranks, world=int(longest["rank"].nunique()),
                 stall_s=float(np.median(excess[stalled])) / 1e9, typical_step_s=float(np.median(med)) / 1e9,
                 collective=_collective_in(analysis, ranks, window_lo, window_hi),
                 phase=_phase_grown(analysis, [(int(r), int(s)) for r, s in zip(late["rank"], late["step"])]))


@dataclass(frozen=True)
class CommShare:
    share: float  # median over ranks of (time inside collectives / step time), profiled steps
    seconds_per_step: float
    collective: str  # the collective the job spends most of that time in
    ranks: int


def comm_share_view(analysis: Analysis) -> CommShare | None:
    """The job's time in collectives per profiled step, or None without collectives and profiler steps."""
    store = analysis.store
    ev = _collective_events(analysis)
    prof = store.steps[store.steps["source"] == "profiler"]
    if ev.empty or prof.empty:
        return None
    shares, per_step = [], []
    for rank, mine in ev[ev["step"] >= 0].groupby("rank"):
        steps = prof[prof["rank"] == rank]
        span = float(steps["dur_ns"].sum())
        if span <= 0:
            continue
        s, e = union(mine["start"].to_numpy(dtype=np.int64), mine["end"].to_numpy(dtype=np.int64))
        busy = float(total(s, e))
        shares.append(min(1.0, busy / span))
        per_step.append(busy / max(1, int(steps["step"].nunique())) / 1e9)
    if not shares:
        return None
    which = ev.assign(d=ev["end"] - ev["start"]).groupby("collective")["d"].sum().idxmax()
    return CommShare(float(np.median(shares)), float(np.median(per_step)), str(which), len(shares))
