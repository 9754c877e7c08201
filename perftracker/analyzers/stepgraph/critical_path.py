"""The cross-rank critical path of each step, and every rank's step time split into bound classes.

`follow` is the one critical-path walker, for the collective level (`critical_path` on `replay.step_graph`) and
the op level (`op_path`); `classify` splits local spans into bound classes; `critical_path_view`'s table adds
up to each rank's step time (`ns`) and says how much of the path lay there (`path_ns`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stepgraph.replay import Replay, StepGraph
from perftracker.analyzers.stragglers.late_rank import CAUSES
from perftracker.analyzers.traces.intervals import covered_within, union
from perftracker.analyzers.traces.per_rank import by_rank

BOUNDS = ("gpu_compute", "memcpy", "data_loading", "host_sync", "cpu_launch", "transfer", "wait")
COLUMNS = ["step", "rank", "bound", "for_rank", "ns", "path_ns"]
Walked = dict[tuple[int, int, str, int], int]  # (step, rank, bound, for_rank) -> ns
_CPU = ("cpu_op", "annotation", "runtime", "user_annotation")


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
