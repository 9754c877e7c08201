"""The op-level critical path of each step, within each rank and across ranks, split into bound classes.

`walk` goes back from a point along the dependency that released it last (a longest path) to a matched collective
or the step's start; `pieces` are those walks per rank and step, joined across ranks by `critical_path.follow`
in `assemble`; `critical_path_ops_view` is the run's table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stepgraph.critical_path import Walked, follow
from perftracker.analyzers.stepgraph.op_graph import CLASSES, RankGraph, Thread, rank_graph
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view
from perftracker.analyzers.thresholds import threshold_int
from perftracker.analyzers.traces.intervals import covered_within
from perftracker.analyzers.traces.per_rank import by_rank

COLUMNS = ["step", "rank", "bound", "for_rank", "ns", "path_ns", "coarsened"]
PIECE_COLUMNS = ["step", "rank", "origin", "reached", "r_for", "transfer_ns", "wait_ns", "more", "unwalked_ns", "hi",
                 "coarse", *CLASSES]
_CPU, _SYNC, _DATA = 4, 3, 2


def _covered(pair: tuple[np.ndarray, np.ndarray], a: int, b: int) -> int:
    if not len(pair[0]) or b <= a:
        return 0
    return int(covered_within(pair[0], pair[1], np.array([a]), np.array([b]))[0])


def _cpu_time(vec: np.ndarray, thread: Thread | None, a: int, b: int) -> None:
    """Thread time [a, b) into data loading, host sync and CPU/launch."""
    if b <= a:
        return
    data = _covered(thread.data, a, b) if thread else 0
    both = _covered(thread.data_sync, a, b) if thread else 0
    vec[_DATA] += data
    vec[_SYNC] += both - data
    vec[_CPU] += (b - a) - both


def walk(g: RankGraph, lo: int, node: int = -1, tid: int = -1, t: int = 0,
         visited: list[int] | None = None) -> tuple[np.ndarray, int]:
    """Classes of the walk back to `lo` or to a matched collective (its node row, else -1): from `node`'s start
    (the node's own time left out), or from thread `tid` at time `t` (docs/internals/stepgraph.md); the nodes whose
    own time lies on it are appended to `visited` when given."""
    vec = np.zeros(len(CLASSES), dtype=np.int64)
    gap = threshold_int("critical.cross_stream_gap_ns")
    slack = threshold_int("critical.resume_slack_ns")
    state, at = ("release", node) if node >= 0 else ("cpu", tid)
    for _ in range(4 * (len(g.end) + sum(len(th.resume) for th in g.threads.values())) + 64):
        if state == "node":
            i = at
            if g.instance[i] >= 0:
                return vec, i
            vec[g.cls[i]] += g.end[i] - max(int(g.start[i]), lo)
            if visited is not None:
                visited.append(i)
            if g.start[i] <= lo:
                return vec, -1
            state = "release"
        if state == "release":
            i, s = at, int(g.start[at])
            best, how = -1, ""
            if g.launch[i] >= 0:
                best, how = int(g.launch[i]), "launch"
            p = int(g.pred[i])
            if p >= 0 and min(int(g.end[p]), s) > best:
                best, how = min(int(g.end[p]), s), "pred"
            k = int(np.searchsorted(g.end, s, side="right")) - 1
            while k >= 0 and k == i:
                k -= 1
            if k >= 0 and g.end[k] > best + gap and s - g.end[k] <= slack and g.end[k] <= s:
                best, how = int(g.end[k]), "other"
            if best < 0:
                vec[_CPU] += s - lo
                return vec, -1
            vec[_CPU] += s - max(best, lo)
            if best <= lo:
                return vec, -1
            t = best
            if how == "launch":
                state, at = "cpu", int(g.launch_tid[i]) if int(g.launch_tid[i]) in g.threads else g.main
            else:
                state, at = "node", (p if how == "pred" else k)
            continue
        if state == "cpu":
            thread = g.threads.get(at)
            if t <= lo:
                return vec, -1
            k = int(np.searchsorted(thread.resume, t, side="right")) - 1 if thread else -1
            if k >= 0 and thread is not None and thread.resume[k] > lo:
                p = int(thread.resume[k])
                _cpu_time(vec, thread, p, t)
                rel = int(thread.released_at[k])
                by = int(thread.by_node[k])
                vec[_SYNC if by >= 0 and g.stream[by] >= 0 else _CPU] += p - max(rel, lo)
                if rel <= lo:
                    return vec, -1
                t = rel
                state, at = ("node", by) if by >= 0 else ("cpu", int(thread.by_thread[k]))
                continue
            if at != g.main and thread is not None and at >= 0:
                j = int(np.searchsorted(thread.busy_s, t, side="right")) - 1
                a = int(thread.burst[j]) if j >= 0 and thread.busy_e[j] >= t else t
                a = max(a, lo)
                _cpu_time(vec, thread, a, t)
                if a <= lo:
                    return vec, -1
                t, at = a, g.main
                continue
            _cpu_time(vec, thread, lo, t)
            return vec, -1
    vec[_CPU] += max(t - lo, 0)  # a cycle at one instant: what is left is the thread's
    return vec, -1


def pieces(g: RankGraph, steps: pd.DataFrame) -> pd.DataFrame:
    """Per profiler step of the rank (`steps`: step, start_ns, dur_ns on its raw clock): the walk from its end and
    from the start of each matched collective that starts inside it, as `critical_path.follow`'s pieces."""
    rows: list[list[int]] = []
    for step, lo, dur in zip(steps["step"].to_numpy(np.int64), steps["start_ns"].to_numpy(np.int64),
                             steps["dur_ns"].to_numpy(np.int64)):
        lo, hi = int(lo), int(lo + dur)
        inside = np.flatnonzero((g.instance >= 0) & (g.start > lo) & (g.start <= hi))
        for origin in [-1, *inside.tolist()]:
            vec, at = walk(g, lo, node=origin, tid=g.main, t=hi)
            reached = [int(g.instance[at]), int(g.waited_for[at])] if at >= 0 else [-1, -1]
            start, end = (int(g.start[at]), int(g.end[at])) if at >= 0 else (-1, -1)
            arrive = start + (int(g.wait[at]) if at >= 0 else 0)
            rows.append([int(step), g.rank, int(g.instance[origin]) if origin >= 0 else -1, *reached,
                         end - max(arrive, lo), min(arrive, end) - max(start, lo), int(start > lo), start - lo, hi,
                         int(g.coarsened), *vec.tolist()])
    return pd.DataFrame(rows, columns=PIECE_COLUMNS)


def assemble(table: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    """The view's table from `pieces` of every rank (docs/internals/stepgraph.md)."""
    if table.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "bound" else bool if c == "coarsened" else np.int64)
                             for c in COLUMNS})
    own: Walked = {}
    path: Walked = {}
    index = {(int(s), int(r), int(o)): i for i, (s, r, o) in
             enumerate(zip(table["step"], table["rank"], table["origin"]))}
    rec = [{str(k): int(v) for k, v in row.items()} for row in table[PIECE_COLUMNS].to_dict("records")]
    ends = table[table["origin"] < 0]
    for step, rank in zip(ends["step"].to_numpy(np.int64), ends["rank"].to_numpy(np.int64)):
        follow(rec, index, CLASSES, int(step), int(rank), False, own)
    ends = ends.assign(aligned=ends["hi"] - ends["rank"].map(offsets).fillna(0).astype(np.int64))
    for step, group in ends.groupby("step"):
        last = int(group["rank"].to_numpy(np.int64)[int(np.argmax(group["aligned"].to_numpy(np.int64)))])
        follow(rec, index, CLASSES, int(str(step)), last, True, path)
    keys = sorted(set(own) | set(path))
    coarse = table.groupby(["step", "rank"])["coarse"].max().astype(bool).to_dict()
    out = pd.DataFrame([(*k, own.get(k, 0), path.get(k, 0), coarse.get((k[0], k[1]), False)) for k in keys],
                       columns=COLUMNS)
    return out.astype({"step": np.int64, "rank": np.int64, "for_rank": np.int64, "ns": np.int64, "path_ns": np.int64,
                       "coarsened": bool})


def waited_for(split: pd.DataFrame) -> pd.Series:
    """Per split row: the member whose arrival released the instance's transfer (the latest aligned arrival; with
    unaligned clocks, the split's last rank)."""
    if split.empty:
        return pd.Series(dtype=np.int64)
    latest = split.loc[split.groupby("instance")["arrival_ns"].idxmax(), ["instance", "rank"]].set_index("instance")
    by_clock = split["instance"].map(latest["rank"]).astype(np.int64)
    return by_clock.where(split["basis"] == "aligned", split["last_rank"]).astype(np.int64)


def op_pieces(analysis: Analysis) -> pd.DataFrame:
    """`pieces` of every rank of the run, a chunk of ranks' events at a time."""
    split = analysis.view(collective_split_view)
    split = split[split["source"] != "nccl_inspector"] if len(split) else split
    split = split.assign(waited_for=waited_for(split)) if len(split) else split.assign(waited_for=0)
    steps = analysis.store.steps
    if steps is None or steps.empty:
        return pd.DataFrame(columns=PIECE_COLUMNS)
    prof = steps[steps["source"].astype(str) == "profiler"] if "source" in steps else steps
    prof = prof.groupby(["rank", "step"], as_index=False).agg(start_ns=("start_ns", "min"), dur_ns=("dur_ns", "max"))
    per_rank = {int(str(r)): g for r, g in prof.groupby("rank")}
    by_split = {int(str(r)): g for r, g in split.groupby("rank")} if len(split) else {}

    def chunk(ranks: list[int], events: pd.DataFrame) -> pd.DataFrame:
        parts = []
        for rank, ev in events.groupby("rank", observed=True):
            mine = per_rank.get(int(str(rank)))
            if mine is None or ev.empty:
                continue
            graph = rank_graph(int(str(rank)), ev, by_split.get(int(str(rank)), split.iloc[:0]), mine)
            parts.append(pieces(graph, mine))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=PIECE_COLUMNS)

    return by_rank(analysis.store, chunk)


def critical_path_ops_view(analysis: Analysis) -> pd.DataFrame:
    """Per (step, rank, bound class, for_rank): the rank's own step time and the cross-rank path's (ns), op level."""
    return assemble(analysis.view(op_pieces), analysis.view(arrivals_view).offsets)
