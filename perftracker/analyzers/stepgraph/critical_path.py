"""The cross-rank critical path of each step, and every rank's step time split into bound classes.

`follow` is the one critical-path walker, for the collective level (`critical_path` on `replay.step_graph`) and
the op level (`walk` back along the dependency that released each point last, its `pieces` per rank and step
joined by `assemble`); both views' tables add up to each rank's step time (`ns`) and say how much of the path
lay there (`path_ns`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stepgraph.op_graph import CLASSES, RankGraph, Thread, rank_graph
from perftracker.analyzers.stepgraph.replay import Replay, StepGraph
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.stragglers.late_rank import CAUSES
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view
from perftracker.analyzers.thresholds import threshold_int
from perftracker.analyzers.traces.intervals import covered_within, union
from perftracker.analyzers.traces.per_rank import by_rank

BOUNDS = ("gpu_compute", "memcpy", "data_loading", "host_sync", "cpu_launch", "transfer", "wait")
COLUMNS = ["step", "rank", "bound", "for_rank", "ns", "path_ns"]
Walked = dict[tuple[int, int, str, int], int]  # (step, rank, bound, for_rank) -> ns
_CPU = ("cpu_op", "annotation", "runtime", "user_annotation")
OP_COLUMNS = [*COLUMNS, "coarsened"]
PIECE_COLUMNS = ["step", "rank", "origin", "reached", "r_for", "transfer_ns", "wait_ns", "more", "unwalked_ns", "hi",
                 "coarse", *CLASSES]
_LAUNCH, _SYNC, _DATA = 4, 3, 2


def local_spans(graph: StepGraph) -> pd.DataFrame:
    """Every local span of the graph on the aligned clock: step, rank, node (row of graph.nodes, -1 for a
    tail), lo, hi."""
    nodes, ranks = graph.nodes, graph.ranks
    hi = nodes["arrival_ns"].to_numpy(np.int64)
    spans = pd.DataFrame({"step": nodes["step"].to_numpy(), "rank": nodes["rank"].to_numpy(),
                          "node": np.arange(len(nodes)), "lo": hi - nodes["local_ns"].to_numpy(np.int64), "hi": hi})
    end = ranks["start_ns"].to_numpy(np.int64) + ranks["dur_ns"].to_numpy(np.int64)
    tails = pd.DataFrame({"step": ranks["step"].to_numpy(), "rank": ranks["rank"].to_numpy(), "node": -1,
                          "lo": end - ranks["tail_ns"].to_numpy(np.int64), "hi": end})
    return pd.concat([spans, tails], ignore_index=True)


def classify(spans: pd.DataFrame, events: pd.DataFrame, offset: int) -> pd.DataFrame:
    """`spans` of one rank with one column per local bound class (ns, adding up to hi - lo); `events` the rank's
    own on its raw clock, `offset` its clock offset (aligned = raw - offset)."""
    lo = spans["lo"].to_numpy(np.int64) + offset
    hi = np.maximum(spans["hi"].to_numpy(np.int64) + offset, lo)
    kind = events["kind"].astype(str).to_numpy()
    start = events["start_ns"].to_numpy(np.int64)
    end = start + events["dur_ns"].to_numpy(np.int64)
    names = events["name"].astype(str)
    cpu = np.isin(kind, _CPU)
    masks = [kind == "compute", np.isin(kind, ["memcpy", "memset"]),
             cpu & names.str.contains(CAUSES["data_loader"]).to_numpy(bool),
             cpu & names.str.contains(CAUSES["host_sync"]).to_numpy(bool)]
    out = spans.copy()
    cover_before = np.zeros(len(spans), dtype=np.int64)
    so_far = np.zeros(len(events), dtype=bool)
    for bound, mask in zip(BOUNDS[:4], masks):
        so_far = so_far | mask
        s, e = union(start[so_far], end[so_far])
        cover = covered_within(s, e, lo, hi)
        out[bound] = cover - cover_before
        cover_before = cover
    out["cpu_launch"] = (hi - lo) - cover_before
    return out


def critical_path(graph: StepGraph, play: Replay, classes: pd.DataFrame) -> pd.DataFrame:
    """Per (step, rank, bound, for_rank): the rank's time there (`ns`) and the critical path's (`path_ns`)."""
    nodes = graph.nodes
    if nodes.empty:
        return pd.DataFrame(columns=COLUMNS)
    local = list(BOUNDS[:5])
    parts = [classes.groupby(["step", "rank"])[local].sum().reset_index().melt(
        id_vars=["step", "rank"], var_name="bound", value_name="ns").assign(for_rank=-1)]
    last = play.instances.set_index("instance")["last_rank"]
    per_node = nodes.assign(for_rank=nodes["instance"].map(last).fillna(-1).astype(np.int64))
    parts.append(per_node.groupby(["step", "rank"])["transfer_ns"].sum().rename("ns").reset_index()
                 .assign(bound="transfer", for_rank=-1))
    parts.append(per_node[per_node["wait_ns"] > 0].groupby(["step", "rank", "for_rank"])["wait_ns"].sum()
                 .rename("ns").reset_index().assign(bound="wait"))
    table = pd.concat(parts, ignore_index=True)
    into: Walked = {}
    pieces, index = _pieces(graph, play, classes)
    for step, group in play.steps.groupby("step"):
        first = int(group["rank"].to_numpy()[int(np.argmax(group["replayed_ns"].to_numpy()))])
        follow(pieces, index, local, int(str(step)), first, True, into)
    path = pd.DataFrame([(*k, v) for k, v in into.items()], columns=["step", "rank", "bound", "for_rank", "path_ns"])
    path = path.astype({"step": np.int64, "rank": np.int64, "for_rank": np.int64, "path_ns": np.int64})
    table = table.merge(path, on=["step", "rank", "bound", "for_rank"], how="left").fillna({"path_ns": 0})
    table = table[(table["ns"] > 0) | (table["path_ns"] > 0)]
    return table.astype({"step": np.int64, "rank": np.int64, "for_rank": np.int64, "ns": np.int64,
                         "path_ns": np.int64})[COLUMNS].sort_values(["step", "rank", "bound"]).reset_index(drop=True)


def follow(pieces: list[dict[str, int]], index: dict[tuple[int, int, int], int], classes: Sequence[str],
           step: int, rank: int, cross: bool, into: Walked) -> None:
    """The one critical-path walker, at either granularity: from (step, rank)'s end piece back, each piece's
    classes, then the transfer of the collective it reached; across ranks (`cross`) on to the piece of the
    member that arrived last (`r_for`) before that collective, else the rank's own wait there and its own piece
    from that collective (`more`; `unwalked_ns` of launch time when it has none)."""
    at = index.get((step, rank, -1))
    for _ in range(len(pieces) + 1):
        if at is None:
            return
        row = pieces[at]
        rank = row["rank"]
        for c in classes:
            _add(into, step, rank, c, row[c])
        reached = row["reached"]
        if reached < 0:
            return
        _add(into, step, rank, "transfer", row["transfer_ns"])
        other = row["r_for"]
        jump = index.get((step, other, reached)) if cross and other not in (-1, rank) else None
        if jump is not None:
            at = jump
            continue
        _add(into, step, rank, "wait", row["wait_ns"], other)
        at = index.get((step, rank, reached)) if row["more"] else None
        if at is None and row["more"]:
            _add(into, step, rank, "cpu_launch", row["unwalked_ns"])  # a collective whose start was not walked


def _add(into: Walked, step: int, rank: int, bound: str, ns: int, for_rank: int = -1) -> None:
    if ns > 0:
        key = (step, rank, bound, for_rank)
        into[key] = into.get(key, 0) + int(ns)


def _pieces(graph: StepGraph, play: Replay, classes: pd.DataFrame
            ) -> tuple[list[dict[str, int]], dict[tuple[int, int, int], int]]:
    """`follow`'s pieces of the step graph: per (step, rank) its tail and per collective (`origin`: its instance)
    the local work before it, back to the previous collective that held the rank (a posted send does not; a
    local span that began at the previous arrival takes the previous span with it)."""
    nodes = graph.nodes
    local = list(BOUNDS[:5])
    values = classes[local].to_numpy(np.int64)
    node_of = classes["node"].to_numpy(np.int64)
    zero = np.zeros(len(local), dtype=np.int64)
    node_row = {int(n): values[i] for i, n in enumerate(node_of) if n >= 0}
    tail_row = {(int(s), int(r)): values[i] for i, (s, r, n) in
                enumerate(zip(classes["step"].to_numpy(), classes["rank"].to_numpy(), node_of)) if n < 0}
    last = {int(i): int(r) for i, r in zip(play.instances["instance"], play.instances["last_rank"])}
    inst = nodes["instance"].to_numpy(np.int64)
    xfer = nodes["transfer_ns"].to_numpy(np.int64)
    after = nodes["after_end"].to_numpy(bool)
    posted = nodes["post"].to_numpy(bool)
    ordered = nodes.sort_values(["step", "rank", "order"], kind="stable")
    chains: dict[tuple[int, int], list[int]] = {(int(s), int(r)): [] for s, r in
                                                zip(graph.ranks["step"].to_numpy(), graph.ranks["rank"].to_numpy())}
    for row, s, r in zip(ordered.index, ordered["step"].to_numpy(), ordered["rank"].to_numpy()):
        chains.setdefault((int(s), int(r)), []).append(int(row))
    pieces: list[dict[str, int]] = []
    index: dict[tuple[int, int, int], int] = {}

    def piece(step: int, rank: int, origin: int, vec: np.ndarray, pos: int, chain: list[int]) -> None:
        while pos >= 0 and posted[chain[pos]]:  # a send its rank posted and went on from: its work, not its wait
            vec = vec + node_row.get(chain[pos], zero)
            pos -= 1
        node = chain[pos] if pos >= 0 else -1
        to = last.get(int(inst[node]), rank) if node >= 0 else -1
        index[(step, rank, origin)] = len(pieces)
        pieces.append({"rank": rank, "reached": int(inst[node]) if node >= 0 else -1, "r_for": to,
                       "transfer_ns": int(xfer[node]) if node >= 0 else 0, "wait_ns": 0, "more": int(to == rank),
                       "unwalked_ns": 0, **dict(zip(local, vec.tolist()))})

    for (step, rank), chain in chains.items():
        piece(step, rank, -1, tail_row.get((step, rank), zero), len(chain) - 1, chain)
        for pos, node in enumerate(chain):
            if (step, rank, int(inst[node])) in index:
                continue
            vec = zero
            while pos >= 0:
                vec = vec + node_row.get(chain[pos], zero)
                if after[chain[pos]]:
                    break
                pos -= 1  # its local work began at its previous arrival: the previous span is on the path too
            piece(step, rank, int(inst[node]), vec, pos - 1, chain)
    return pieces, index


def classified_spans(analysis: Analysis, graph: StepGraph, offsets: pd.Series) -> pd.DataFrame:
    """`classify` over every rank's spans, a chunk of ranks' events at a time."""
    spans = local_spans(graph)
    if spans.empty:
        return spans.assign(**{b: pd.Series(dtype=np.int64) for b in BOUNDS[:5]})
    per_rank = {int(str(r)): g for r, g in spans.groupby("rank")}

    def chunk(ranks: list[int], events: pd.DataFrame) -> pd.DataFrame:
        parts = []
        by_ev = {int(str(r)): g for r, g in events.groupby("rank")} if "rank" in events else {}
        for r in sorted({int(r) for r in ranks} | set(by_ev)):
            mine = per_rank.get(r)
            if mine is None:
                continue
            ev = by_ev.get(r, events.iloc[:0]) if by_ev else events
            parts.append(classify(mine, ev, int(offsets.get(int(r), 0)) if len(offsets) else 0))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    out = by_rank(analysis.store, chunk)
    return out if len(out) else spans.assign(**{b: 0 for b in BOUNDS[:5]})


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
    vec[_LAUNCH] += (b - a) - both


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
                vec[_LAUNCH] += s - lo
                return vec, -1
            vec[_LAUNCH] += s - max(best, lo)
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
                vec[_SYNC if by >= 0 and g.stream[by] >= 0 else _LAUNCH] += p - max(rel, lo)
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
    vec[_LAUNCH] += max(t - lo, 0)  # a cycle at one instant: what is left is the thread's
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
                             for c in OP_COLUMNS})
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
                       columns=OP_COLUMNS)
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
