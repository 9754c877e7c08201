"""One rank's op-level dependency graph: its GPU work per stream, its CPU threads, and what released each.

`rank_graph(rank, events, matched, steps)` builds a `RankGraph`: GPU nodes with their launches and stream
predecessors, matched collectives, and each CPU thread's blocked periods with what released them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.analyzers.stragglers.late_rank import CAUSES
from perftracker.analyzers.thresholds import threshold_int
from perftracker.analyzers.traces.intervals import union

Ints = npt.NDArray[np.int64]
CLASSES = ("gpu_compute", "memcpy", "data_loading", "host_sync", "cpu_launch", "transfer")
GPU_CLASS = {"compute": 0, "comm": 5, "memcpy": 1, "memset": 1}
_WORK = ("cpu_op", "runtime", "collective_cpu")
_CPU = ("cpu_op", "runtime", "collective_cpu", "annotation", "user_annotation")
SYNC_CALL = re.compile(r"^(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)Synchronize|^(?:cuda|hip)Memcpy$|^cuMemcpyDtoH")


@dataclass
class Thread:
    """One CPU thread: busy intervals (disjoint, sorted), the data-loading and data-or-sync unions, its
    synchronizing calls, and its resume points (time, released at, released by: node row or -1, by thread: tid or -1, the blocking was a sync call)."""

    busy_s: Ints
    busy_e: Ints
    data: tuple[Ints, Ints]
    data_sync: tuple[Ints, Ints]
    sync_s: Ints
    sync_e: Ints
    burst: Ints  # per busy interval: the start of its burst (busy intervals less than the blocked gap apart)
    resume: Ints = field(default_factory=lambda: np.empty(0, np.int64))
    released_at: Ints = field(default_factory=lambda: np.empty(0, np.int64))
    by_node: Ints = field(default_factory=lambda: np.empty(0, np.int64))
    by_thread: Ints = field(default_factory=lambda: np.empty(0, np.int64))


@dataclass
class RankGraph:
    """The graph of docs/internals/stepgraph.md; node columns are arrays of one length, sorted by end."""

    rank: int
    main: int
    start: Ints
    end: Ints
    stream: Ints
    cls: Ints
    launch: Ints  # release time by the launch (-1 unknown)
    launch_tid: Ints
    pred: Ints  # previous node on the same stream (-1 none)
    instance: Ints  # matched collective instance (-1 none)
    wait: Ints
    waited_for: Ints  # the member whose arrival released the transfer (-1 none)
    step: Ints  # the matched collective's step (-1 none)
    threads: dict[int, Thread]
    coarsened: bool = False


def _ints(values: object) -> Ints:
    return np.asarray(values, dtype=np.int64)


def _gpu_nodes(ev: pd.DataFrame) -> pd.DataFrame:
    """GPU work of one rank with launch release, launching thread and CUDA-graph launches as one node."""
    gpu = ev[ev["kind"].isin(list(GPU_CLASS)).to_numpy() & (ev["stream"].to_numpy() >= 0)]
    nodes = pd.DataFrame({"window": gpu["window"].to_numpy(np.int64), "stream": gpu["stream"].to_numpy(np.int64),
                          "correlation": gpu["correlation"].to_numpy(np.int64),
                          "start": gpu["start_ns"].to_numpy(np.int64),
                          "end": (gpu["start_ns"] + gpu["dur_ns"]).to_numpy(np.int64),
                          "cls": gpu["kind"].astype(str).map(GPU_CLASS).to_numpy(np.int64)})
    runtime = ev[(ev["kind"] == "runtime").to_numpy() & (ev["correlation"].to_numpy() >= 0)]
    calls = pd.DataFrame({"window": runtime["window"].to_numpy(np.int64),
                          "correlation": runtime["correlation"].to_numpy(np.int64),
                          "call_end": (runtime["start_ns"] + runtime["dur_ns"]).to_numpy(np.int64),
                          "launch_tid": runtime["tid"].to_numpy(np.int64)}).drop_duplicates(["window", "correlation"])
    nodes = nodes.merge(calls, on=["window", "correlation"], how="left")
    nodes["launch"] = np.minimum(nodes["call_end"].fillna(-1).to_numpy(np.int64), nodes["start"].to_numpy(np.int64))
    nodes["launch_tid"] = nodes["launch_tid"].fillna(-1).astype(np.int64)
    graph = (nodes["correlation"] >= 0) & (nodes["cls"] != 5) & nodes.duplicated(
        ["window", "stream", "correlation"], keep=False)
    if graph.any():  # one CUDA-graph launch: its kernels on a stream as one node
        merged = nodes[graph].groupby(["window", "stream", "correlation"], as_index=False).agg(
            start=("start", "min"), end=("end", "max"), cls=("cls", "min"), launch=("launch", "min"),
            launch_tid=("launch_tid", "first"))
        nodes = pd.concat([nodes[~graph], merged], ignore_index=True)
    return nodes[["window", "stream", "start", "end", "cls", "launch", "launch_tid"]]


def _coarsen(nodes: pd.DataFrame) -> pd.DataFrame:
    """Consecutive unmatched nodes of one class on one stream, less than the blocked gap apart, as one node."""
    gap = threshold_int("critical.blocked_gap_ns")
    nodes = nodes.sort_values(["window", "stream", "start"], kind="stable").reset_index(drop=True)
    prev_end = nodes.groupby(["window", "stream"])["end"].shift(1)
    same = (nodes["instance"] < 0) & (nodes["instance"].shift(1) < 0) & (nodes["cls"] == nodes["cls"].shift(1))
    joins = same & prev_end.notna() & ((nodes["start"] - prev_end) < gap)
    how = {c: "min" if c == "start" else "max" if c == "end" else "first" for c in nodes.columns}
    return nodes.groupby((~joins).cumsum(), as_index=False).agg(**{c: (c, f) for c, f in how.items()})


def _with_collectives(nodes: pd.DataFrame, matched: pd.DataFrame, main: int) -> pd.DataFrame:
    """Nodes with their matched instance (GPU kernels by window and start; CPU collectives added as nodes)."""
    cols = {"instance": -1, "wait": 0, "waited_for": -1, "step": -1}
    nodes = nodes.assign(**cols)
    if matched.empty:
        return nodes
    rows = matched.assign(waited_for=matched["waited_for"].astype(np.int64))
    gpu = rows[rows["source"] == "gpu_kernel"]
    key = pd.MultiIndex.from_arrays([gpu["window"].to_numpy(np.int64), gpu["start_ns"].to_numpy(np.int64)])
    at = pd.Series(np.arange(len(gpu)), index=key)
    at = at[~at.index.duplicated()]
    hit = at.reindex(pd.MultiIndex.from_arrays([nodes["window"].to_numpy(np.int64), nodes["start"].to_numpy(np.int64)]))
    ok = hit.notna().to_numpy() & (nodes["cls"].to_numpy() == 5)
    pick = hit.fillna(0).to_numpy(np.int64)[ok]
    for col, src in (("instance", "instance"), ("wait", "wait_ns"), ("waited_for", "waited_for"), ("step", "step")):
        values = nodes[col].to_numpy(np.int64).copy()
        values[ok] = gpu[src].to_numpy(np.int64)[pick]
        nodes[col] = values
    cpu = rows[rows["source"] != "gpu_kernel"]
    if len(cpu):
        start = cpu["start_ns"].to_numpy(np.int64)
        extra = pd.DataFrame({"window": cpu["window"].to_numpy(np.int64), "stream": -2, "start": start,
                              "end": start + cpu["dur_ns"].to_numpy(np.int64), "cls": 5, "launch": start,
                              "launch_tid": main, "instance": cpu["instance"].to_numpy(np.int64),
                              "wait": cpu["wait_ns"].to_numpy(np.int64),
                              "waited_for": cpu["waited_for"].to_numpy(np.int64),
                              "step": cpu["step"].to_numpy(np.int64)})
        nodes = pd.concat([nodes, extra], ignore_index=True)
    return nodes


def _main_thread(ev: pd.DataFrame) -> int:
    """The thread of the ProfilerStep markers, else the one that launches most, else the busiest."""
    names = ev["name"].astype(str)
    steps = ev[names.str.startswith("ProfilerStep#").to_numpy()]
    if len(steps):
        return int(steps["tid"].mode().iloc[0])
    runtime = ev[ev["kind"] == "runtime"]
    cpu = runtime if len(runtime) else ev[ev["kind"].isin(list(_CPU)).to_numpy() & (ev["stream"].to_numpy() < 0)]
    if not len(cpu):
        return -1
    per = cpu.groupby("tid")["dur_ns"].sum()
    return int(per.index.to_numpy(np.int64)[int(np.argmax(per.to_numpy()))])


def _threads(ev: pd.DataFrame) -> dict[int, Thread]:
    cpu = ev[ev["kind"].isin(list(_CPU)).to_numpy() & (ev["stream"].to_numpy() < 0)]
    names = cpu["name"].astype(str)
    is_step = names.str.startswith("ProfilerStep#").to_numpy()
    data = names.str.contains(CAUSES["data_loader"]).to_numpy(bool)
    sync = (cpu["kind"] == "runtime").to_numpy() & names.str.contains(SYNC_CALL).to_numpy(bool)
    work = cpu["kind"].isin(list(_WORK)).to_numpy()
    start = cpu["start_ns"].to_numpy(np.int64)
    end = start + cpu["dur_ns"].to_numpy(np.int64)
    tids = cpu["tid"].to_numpy(np.int64)
    gap = threshold_int("critical.blocked_gap_ns")
    out: dict[int, Thread] = {}
    for tid in np.unique(tids):
        mine = (tids == tid) & ~is_step
        busy = union(start[mine & work], end[mine & work])
        first = np.ones(len(busy[0]), bool)
        first[1:] = (busy[0][1:] - busy[1][:-1]) >= gap
        burst = busy[0][np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))] if len(first) else busy[0]
        out[int(tid)] = Thread(busy[0], busy[1], union(start[mine & data], end[mine & data]),
                               union(start[mine & (data | sync)], end[mine & (data | sync)]),
                               start[mine & sync], end[mine & sync], burst)
    return out


def _resume_points(graph: RankGraph) -> None:
    """Each thread's blocked periods and what released them (docs/internals/stepgraph.md)."""
    gap, slack = threshold_int("critical.blocked_gap_ns"), threshold_int("critical.resume_slack_ns")
    ends = graph.end  # sorted
    coll_row = np.flatnonzero(graph.stream == -2)
    coll_end = ends[coll_row]
    bursts = {tid: t.busy_e for tid, t in graph.threads.items()}
    for tid, thread in graph.threads.items():
        gs, ge = thread.busy_e[:-1], thread.busy_s[1:]
        idle = (ge - gs) >= gap
        sync_s, sync_e = thread.sync_s, thread.sync_e
        b0 = np.concatenate([gs[idle], sync_s]).astype(np.int64)
        b1 = np.concatenate([ge[idle], sync_e]).astype(np.int64)
        is_sync = np.concatenate([np.zeros(int(idle.sum()), bool), np.ones(len(sync_s), bool)])
        k = np.searchsorted(ends, b1, side="right") - 1
        node_end = np.where(k >= 0, ends[np.clip(k, 0, None)] if len(ends) else 0, -1)
        node_ok = (k >= 0) & (node_end >= b0) & is_sync
        if len(coll_end):  # a thread idle in an unprofiled wait for a CPU collective (gloo's work.wait())
            j = np.searchsorted(coll_end, b1, side="right") - 1
            c_end = np.where(j >= 0, coll_end[np.clip(j, 0, None)], -1)
            c_ok = ~is_sync & (j >= 0) & (c_end >= b0) & (b1 - c_end <= slack)
            k = np.where(c_ok, coll_row[np.clip(j, 0, None)], k)
            node_end = np.where(c_ok, c_end, node_end)
            node_ok = node_ok | c_ok
        other_at = np.full(len(b1), -1, np.int64)
        other_tid = np.full(len(b1), -1, np.int64)
        for other, oe in bursts.items():
            if other == tid or not len(oe):
                continue
            j = np.searchsorted(oe, b1, side="right") - 1
            cand = np.where(j >= 0, oe[np.clip(j, 0, None)], -1)
            better = ~is_sync & (cand >= b0) & (b1 - cand <= slack) & (cand > other_at)
            other_at[better], other_tid[better] = cand[better], other
        use_node = node_ok & (node_end >= other_at)
        use_thread = ~use_node & (other_tid >= 0)
        keep = use_node | use_thread
        order = np.argsort(b1[keep], kind="stable")
        thread.resume = b1[keep][order]
        thread.released_at = np.where(use_node, node_end, other_at)[keep][order]
        thread.by_node = np.where(use_node, k, -1)[keep][order]
        thread.by_thread = np.where(use_thread, other_tid, -1)[keep][order]


def rank_graph(rank: int, events: pd.DataFrame, matched: pd.DataFrame, steps: pd.DataFrame) -> RankGraph:
    """The `RankGraph` of one rank (docs/internals/stepgraph.md); `matched` holds `waited_for` per row."""
    main = _main_thread(events)
    nodes = _with_collectives(_gpu_nodes(events), matched, main)
    n_steps = max(int(len(steps)), 1)
    coarse = len(nodes) > threshold_int("critical.max_nodes_per_step") * n_steps
    if coarse:
        nodes = _coarsen(nodes)
    nodes = nodes.sort_values(["end", "start"], kind="stable").reset_index(drop=True)
    pred = np.full(len(nodes), -1, np.int64)
    by_start = nodes.sort_values(["window", "stream", "start"], kind="stable")
    prev = by_start.groupby(["window", "stream"]).cumcount() > 0
    idx = by_start.index.to_numpy()
    pred[idx[1:][prev.to_numpy()[1:]]] = idx[:-1][prev.to_numpy()[1:]]
    pred[nodes["stream"].to_numpy() < 0] = -1
    col = {c: _ints(nodes[c]) for c in ("start", "end", "stream", "cls", "launch", "launch_tid", "instance", "wait",
                                        "waited_for", "step")}
    graph = RankGraph(rank=rank, main=main, start=col["start"], end=col["end"], stream=col["stream"], cls=col["cls"],
                      launch=col["launch"], launch_tid=col["launch_tid"], pred=pred, instance=col["instance"],
                      wait=col["wait"], waited_for=col["waited_for"], step=col["step"], threads=_threads(events),
                      coarsened=coarse)
    _resume_points(graph)
    return graph
