"""The pipeline room's views: per rank and step measurements, per stage compute, and the report's DP x PP grid.

`stage_steps_view` (one row per rank and profiled step: busy, time blocked in receives and collectives as unions of
intervals, its passes), `stage_compute_view` (the lightest replica's compute per stage and step, from its ops) and
`layout_grid_view` (one row per worker); `victims_of(analysis, rank)`, a slow worker's pipeline neighbours and
data-parallel peers with their excess wait per step (evidence of its finding), and `seat_of`, what that finding says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import preferred
from perftracker.analyzers.layout.model import Layout
from perftracker.analyzers.layout.views import P2P, p2p_ops, parallel_layout_view
from perftracker.analyzers.stragglers.op_work import compute_trials
from perftracker.analyzers.traces.intervals import clipped_total
from perftracker.evidence.steps import StragglerEvidence, VictimRow

GRID_COLUMNS = ["rank", "dp", "pp", "tp", "step_ms", "busy_ms", "wait_ms", "cost_ms"]
COMPUTE_COLUMNS = ["stage", "step", "compute_ms", "microbatches", "replicas"]
MIN_WAIT_MS = 0.05
COLUMNS = ["rank", "stage", "replica", "step", "start_ns", "p2p_end_ns", "phase_end_ns", "step_ms", "phase_ms",
           "recv_wait_ms", "warmup_wait_ms", "cooldown_wait_ms", "coll_wait_ms", "busy_ms", "busy_pipe_ms", "microbatches",
           "passes", "linear_per_mb"]


def _union_ns(spans: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Total length of the union of [start, end) spans clipped to [lo, hi)."""
    arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
    return clipped_total(arr[:, 0], arr[:, 1], lo, hi)


def _collectives(events: pd.DataFrame) -> pd.DataFrame:
    """Non-P2P collective work spans (GPU kernels, else CPU work spans rather than their dispatch ops)."""
    coll = events["collective"]
    rows = events[(coll.notna() & (coll != "") & ~coll.isin(P2P)).to_numpy()]
    if rows.empty:
        return rows
    dispatch = rows["name"].astype(str).str.startswith(("c10d::", "record_param_comms"))
    gpu = rows["kind"].astype(str) == "comm"
    work_ranks = set(rows.loc[~dispatch, "rank"])
    return rows[gpu | ~dispatch | ~rows["rank"].isin(work_ranks)]


def pass_letters(ops: pd.DataFrame, stage: int, stages: int, layout: Layout) -> str:
    """The stage's pass letters in order, one per pass of a micro-batch: the first stage's sends are its
    forwards and its receives its backwards, the last stage's receives its forwards and its sends its backwards;
    a middle stage's receives from the previous stage are forwards, from the next one backwards (peer needed)."""
    letters: list[str] = []
    for op, peer in zip(ops["op"], ops["peer"], strict=True):
        if op not in ("send", "recv"):
            return ""
        if stage == 0:
            letters.append("F" if op == "send" else "B")
        elif stage == stages - 1:
            letters.append("F" if op == "recv" else "B")
        elif peer < 0 or peer not in layout.coords:
            return ""
        elif op == "recv":
            letters.append("F" if layout.stage_of(int(peer)) < stage else "B")
    return "".join(letters)


def stage_steps_view(analysis: Analysis) -> pd.DataFrame:
    """One row per (rank, profiled step) of a pipeline stage (docs/internals/stepgraph.md); empty unless the layout
    has two or more pipeline stages."""
    store, layout = analysis.store, analysis.view(parallel_layout_view)
    stages = layout.stages
    steps = store.steps
    if stages < 2 or steps.empty:
        return pd.DataFrame(columns=COLUMNS)
    steps = preferred(steps, "profiler")
    events = store.events
    ops = p2p_ops(events)
    colls = _collectives(events)
    linear = events[((events["kind"] == "cpu_op") & (events["name"] == "aten::linear")).to_numpy()]
    linear_n = linear.groupby(["rank", "step"]).size()
    rows = []
    for rank, mine in steps.groupby("rank"):
        r = int(str(rank))
        if r not in layout.coords or "pp" not in layout.coords[r]:
            continue
        stage = layout.stage_of(r)
        my_ops = ops[ops["rank"] == r]
        my_coll = colls[colls["rank"] == r]
        for start, dur, step in zip(mine["start_ns"], mine["dur_ns"], mine["step"], strict=True):
            lo, hi = int(start), int(start) + int(dur)
            inside = my_ops[(my_ops["start_ns"] >= lo) & (my_ops["start_ns"] < hi)]
            if inside.empty:
                continue
            c_inside = my_coll[(my_coll["start_ns"] < hi) & (my_coll["start_ns"] + my_coll["dur_ns"] > lo)]
            last_p2p = int(inside["end_ns"].max())
            after = c_inside[c_inside["start_ns"] >= int(inside["start_ns"].max())]["start_ns"]
            phase_end = min(hi, int(after.min())) if not after.empty else hi
            recvs = inside[inside["op"] == "recv"]
            recv_spans = list(zip(recvs["start_ns"].astype(int), recvs["end_ns"].astype(int), strict=True))
            coll_spans = list(zip(c_inside["start_ns"].astype(int),
                                  (c_inside["start_ns"] + c_inside["dur_ns"]).astype(int), strict=True))
            recv_wait = _union_ns(recv_spans, lo, phase_end)
            sends = inside.loc[inside["op"] == "send", "start_ns"]
            first_send, last_send = (int(sends.min()), int(sends.max())) if not sends.empty else (hi, lo)
            warmup = _union_ns([sp for sp in recv_spans if sp[0] < first_send], lo, phase_end)
            cooldown = _union_ns([sp for sp in recv_spans if sp[0] > last_send], lo, phase_end)
            waits = _union_ns(recv_spans + coll_spans, lo, hi)
            passes = pass_letters(inside, stage, stages, layout)
            # without the letters (a middle stage, peers unknown) its receives are one forward and one backward each
            m = passes.count("F") if passes else int((inside["op"] == "recv").sum()) // 2
            phase = max(phase_end, last_p2p) - lo
            rows.append({
                "rank": r, "stage": stage, "replica": layout.replica_of(r), "step": int(step), "start_ns": lo,
                "p2p_end_ns": last_p2p, "phase_end_ns": lo + phase,
                "step_ms": dur / 1e6, "phase_ms": phase / 1e6, "recv_wait_ms": recv_wait / 1e6,
                "warmup_wait_ms": warmup / 1e6, "cooldown_wait_ms": cooldown / 1e6,
                "coll_wait_ms": max(0, waits - recv_wait) / 1e6, "busy_ms": max(0, int(dur) - waits) / 1e6,
                "busy_pipe_ms": max(0, phase - recv_wait) / 1e6, "microbatches": m, "passes": passes,
                "linear_per_mb": float(linear_n.get((r, int(step)), 0)) / m if m else 0.0,
            })
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.astype(dict.fromkeys(["rank", "stage", "replica", "step", "start_ns", "p2p_end_ns", "phase_end_ns",
                                     "microbatches"], np.int64))


def stage_compute_view(analysis: Analysis) -> pd.DataFrame:
    """Per (stage, step): the lightest replica's compute from its ops (ms), its micro-batches, the replicas seen."""
    rows = analysis.view(stage_steps_view)
    if rows.empty:
        return pd.DataFrame(columns=COMPUTE_COLUMNS)
    events = analysis.store.events
    events = events[events["rank"].isin(list(rows["rank"].unique())) & (events["step"] >= 0)]
    bounds = rows[["rank", "step", "p2p_end_ns", "phase_end_ns"]].drop_duplicates(["rank", "step"])
    window = events[["rank", "step"]].merge(bounds, on=["rank", "step"], how="left")  # one row per event, in order
    backward = _backward_ops(events["name"])
    start = events["start_ns"].to_numpy()
    inside = (start < window["p2p_end_ns"].to_numpy()) | (backward & (start < window["phase_end_ns"].to_numpy()))
    trials = compute_trials(events[inside])
    if trials.empty:
        return pd.DataFrame(columns=COMPUTE_COLUMNS)
    steps = sorted(int(s) for s in events.loc[events["step"] >= 0, "step"].unique())
    trials = trials.assign(step=trials["trial"].map(dict(enumerate(steps))))
    joined = rows.merge(trials[["rank", "step", "value"]], on=["rank", "step"], how="inner")
    grouped = joined.groupby(["stage", "step"])
    out = pd.DataFrame({"compute_ms": grouped["value"].min() / 1e6, "microbatches": grouped["microbatches"].max(),
                        "replicas": grouped["rank"].nunique()}).reset_index()
    return out[COMPUTE_COLUMNS]


def _backward_ops(names: pd.Series) -> np.ndarray:
    """Which events are autograd's backward ops, judged once per distinct name (the column is a category)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        text = names.astype(str)
        return (text.str.startswith("autograd::") | text.str.contains("Backward", regex=False)).to_numpy()
    cats = pd.Series(names.cat.categories.astype(str))
    hit = (cats.str.startswith("autograd::") | cats.str.contains("Backward", regex=False)).to_numpy()
    codes = names.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.clip(codes, 0, None)] if len(hit) else False, False)


def layout_grid_view(analysis: Analysis) -> pd.DataFrame:
    """One row per worker of a pipeline job: its place (dp, pp, tp), its median step, busy and wait time over the
    profiled steps (ms), and cost_ms, its busy time beyond the median worker's."""
    rows = analysis.view(stage_steps_view)
    if rows.empty:
        return pd.DataFrame(columns=GRID_COLUMNS)
    layout = analysis.view(parallel_layout_view)
    per = rows.assign(wait_ms=rows["recv_wait_ms"] + rows["coll_wait_ms"]).groupby("rank")[
        ["step_ms", "busy_ms", "wait_ms"]].median().reset_index()
    for dim in ("dp", "pp", "tp"):
        per[dim] = [layout.coords[int(r)].get(dim, 0) for r in per["rank"]]
    per["cost_ms"] = (per["busy_ms"] - per["busy_ms"].median()).clip(lower=0.0)
    return per[GRID_COLUMNS].round(3)


@dataclass(frozen=True)
class Victim:
    """One rank that waits for the slow worker."""

    rank: int
    position: str  # "rank 3: stage 1, replica 1"
    role: str  # "pipeline successor" | "pipeline predecessor" | "data-parallel peer"
    where_waiting: str  # "in receives" | "in the gradient collective"
    wait_ms: float  # its wait per step beyond a like rank of another replica (median over steps)

    def to_dict(self) -> VictimRow:
        return {"rank": self.rank, "position": self.position, "role": self.role, "waits": self.where_waiting,
                "wait_ms_per_step": round(self.wait_ms, 3)}


@dataclass(frozen=True)
class Seat:
    """A named rank's place for its finding's words and evidence."""

    where: str  # " (stage 0, replica 1)" or ""
    position: str  # "rank 1: stage 0, replica 1" or ""
    victims: tuple[Victim, ...]
    alone_at_stage: bool

    def victims_clause(self) -> str:
        return ("; its victims: " + ", ".join(f"rank {v.rank} ({v.role}, {v.wait_ms:.1f} ms per step "
                                             f"{v.where_waiting})" for v in self.victims)) if self.victims else ""

    def evidence(self) -> StragglerEvidence:
        return {**({"position": self.position} if self.position else {}),
                **({"victims": [v.to_dict() for v in self.victims]} if self.victims else {})}


def seat_of(analysis: Analysis, rank: int) -> Seat:
    """Where `rank` sits, whom it makes wait, and whether it is alone at its stage (docs/internals/stepgraph.md)."""
    layout = analysis.view(parallel_layout_view)
    sure = layout.stages > 1 or layout.confidence >= 0.9  # a layout guessed from strides alone is not said
    place = layout.where(rank).partition(": ")[2] if sure else ""
    return Seat(f" ({place})" if place else "", layout.where(rank) if place else "", tuple(victims_of(analysis, rank)),
                layout.stages > 1 and not layout.peers(rank, "dp"))


def _excess(rows: pd.DataFrame, layout: Layout, victim: int, slow: int, column: str) -> float:
    """The victim's median wait (column) minus that of a rank at its stage in a replica apart from the slow one's."""
    mine = rows[rows["rank"] == victim].set_index("step")[column]
    if mine.empty:
        return 0.0
    apart = [r for r in layout.stage_ranks(layout.stage_of(victim))
             if r != victim and layout.replica_of(r) != layout.replica_of(slow)]
    if not apart:
        return float(mine.median())
    others = rows[rows["rank"].isin(apart)].groupby("step")[column].median()
    return float((mine - others).dropna().median()) if not others.empty else float(mine.median())


def victims_of(analysis: Analysis, rank: int) -> list[Victim]:
    """The ranks `rank` makes wait (docs/internals/stepgraph.md); [] without a known layout."""
    layout = analysis.view(parallel_layout_view)
    if not layout.known or rank not in layout.coords:
        return []
    rows = analysis.view(stage_steps_view)
    before, after = layout.pipeline_neighbours(rank)
    wanted = [(n, f"pipeline {role}", "in receives", "recv_wait_ms")
              for n, role in ((after, "successor"), (before, "predecessor")) if n is not None]
    wanted += [(peer, "data-parallel peer", "in the gradient collective", "coll_wait_ms")
               for peer in layout.peers(rank, "dp")]
    out = []
    for victim, role, where, column in wanted:
        wait = _excess(rows, layout, victim, rank, column) if not rows.empty else 0.0
        if wait >= MIN_WAIT_MS:
            out.append(Victim(victim, layout.where(victim), role, where, wait))
    return out
