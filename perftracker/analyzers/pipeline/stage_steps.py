"""Per rank and step of a pipeline job: busy time, time blocked in receives and collectives, its passes.

`stage_steps(store, layout)`: one row per (rank, profiled step) of a rank with a pipeline stage (columns in
docs/internals/stepgraph.md); waits are unions of intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.layout.model import Layout
from perftracker.analyzers.layout.p2p import P2P, p2p_ops
from perftracker.analyzers.traces.intervals import clipped_total
from perftracker.store import Store

COLUMNS = ["rank", "stage", "replica", "step", "start_ns", "p2p_end_ns", "phase_end_ns", "step_ms", "phase_ms", "recv_wait_ms",
           "warmup_wait_ms", "cooldown_wait_ms", "coll_wait_ms", "busy_ms",
           "busy_pipe_ms", "microbatches", "passes", "linear_per_mb"]


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


def stage_steps(store: Store, layout: Layout) -> pd.DataFrame:
    """One row per (rank, profiled step) of a pipeline stage (docs/internals/stepgraph.md)."""
    stages = layout.stages
    steps = store.steps
    if stages < 2 or steps.empty:
        return pd.DataFrame(columns=COLUMNS)
    prof = steps[steps["source"].astype(str) == "profiler"]
    steps = prof if not prof.empty else steps
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
    return out.astype({"rank": np.int64, "stage": np.int64, "replica": np.int64, "step": np.int64,
                       "start_ns": np.int64, "p2p_end_ns": np.int64, "phase_end_ns": np.int64,
                       "microbatches": np.int64})
