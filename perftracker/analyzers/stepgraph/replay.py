"""The cross-rank step graph and its what-if replay (ByteDance OSDI'25's method, on perftracker's collectives).

`step_graph(table, steps, offsets)` chains each rank's local work, collectives and tail per step; `replay(graph,
...)` recomputes the step times, exactly as measured when nothing is changed; `idealize` and
`with_transfer` change the durations for a what-if; `slowdown` and `fix_each_rank` are OSDI'25's S and S_w.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from perftracker.analyzers.stepgraph.dag import finish
from perftracker.analyzers.stragglers.group_of import P2P_COLLECTIVES


@dataclass(frozen=True)
class StepGraph:
    """Per (instance, rank) row: step, order (completion order of the instance in the step), local_ns,
    transfer_ns (the instance's measured transfer on that rank), after_end (the local work started at the
    previous collective's end, else at its arrival), peer_key (same value: peers, see docs/internals/stepgraph.md),
    p2p (a send or recv); per (step, rank): start_ns, dur_ns (measured), tail_ns, peer_key (same value: the
    ranks of that step that ran the same sequence of collectives)."""

    nodes: pd.DataFrame
    ranks: pd.DataFrame

    @cached_property
    def dag(self) -> StepDag:
        """The graph as a DAG (`step_dag`), built once for all its replays."""
        return step_dag(self)


@dataclass(frozen=True)
class Replay:
    """Replayed step time per (step, rank) and, per instance, its replayed start of transfer (last arrival)
    and which member arrived last."""

    steps: pd.DataFrame  # step, rank, measured_ns, replayed_ns
    instances: pd.DataFrame  # instance, step, last_rank, last_arrival_ns, end_ns

    def step_times(self) -> pd.DataFrame:
        """Per step: measured and replayed step time (mean over the ranks) and the relative error."""
        per = self.steps.groupby("step")[["measured_ns", "replayed_ns"]].mean()
        per["error"] = (per["replayed_ns"] - per["measured_ns"]).abs() / per["measured_ns"].where(per["measured_ns"] > 0)
        return per.reset_index()

    def error(self) -> float:
        """Median relative error of the replayed step time against the measured one (nan when no step)."""
        per = self.step_times()
        return float(per["error"].median()) if len(per) else float("nan")

    def mean_step_ns(self) -> float:
        return float(self.steps.groupby("step")["replayed_ns"].mean().mean()) if len(self.steps) else 0.0


def step_graph(table: pd.DataFrame, steps: pd.DataFrame, offsets: pd.Series) -> StepGraph:
    """The chains of `table` (`wait_transfer.split` rows) per (step, rank); see docs/internals/stepgraph.md."""
    rows = table[table["step"] >= 0]
    if rows.empty:
        return StepGraph(_empty_nodes(), pd.DataFrame(columns=["step", "rank", "start_ns", "dur_ns", "tail_ns"]))
    frame = rows[["instance", "step", "rank", "arrival_ns", "dur_ns", "transfer_ns", "wait_ns"]].astype(np.int64)
    names = rows["collective"].astype(str) if "collective" in rows else pd.Series("", index=rows.index)
    frame["collective"] = names.to_numpy()
    frame["end_ns"] = frame["arrival_ns"] + frame["dur_ns"]
    frame["p2p"], frame["post"] = _p2p(frame)
    # a posted send does not hold its rank: its place in the chain is its arrival; the pair completes with its recv
    frame["eff_end"] = np.where(frame["post"], frame["arrival_ns"], frame["end_ns"])
    done = frame["end_ns"].where(~frame["post"]).groupby(frame["instance"]).transform("max")
    frame["key"] = np.where(frame["post"], frame["arrival_ns"], done.fillna(frame["end_ns"])).astype(np.int64)
    frame = frame.sort_values(["step", "rank", "key", "instance"], kind="stable")
    frame["order"] = frame.groupby("step")["key"].rank(method="dense").astype(np.int64)
    by = frame.groupby(["step", "rank"])  # grouped once: each groupby factorizes the keys again
    prev_end, prev_arr = by["eff_end"].shift(1), by["arrival_ns"].shift(1)
    after_end = prev_end.isna() | (frame["arrival_ns"] >= prev_end)
    base = prev_end.where(after_end, prev_arr)
    per_rank = _step_spans(frame, steps, offsets)
    first = by["arrival_ns"].transform("min")
    mapped = frame.set_index(["step", "rank"]).index.map(per_rank["start_ns"].to_dict())
    start = pd.Series(np.asarray(mapped, dtype=float), index=frame.index).fillna(first.astype(float))
    start = start.where(start <= first, first.astype(float))
    frame["local_ns"] = (frame["arrival_ns"] - base.fillna(start)).clip(lower=0).astype(np.int64)
    frame["after_end"] = after_end.to_numpy(bool)
    last_end, first_arrival = by["eff_end"].max(), by["arrival_ns"].min()
    spans = pd.DataFrame({"last_end": last_end, "first": first_arrival}).join(per_rank, how="left")
    spans["start_ns"] = np.minimum(spans["start_ns"].fillna(spans["first"]), spans["first"])
    measured_end = (spans["start_ns"] + spans["dur_ns"]).fillna(spans["last_end"])
    spans["tail_ns"] = (measured_end - spans["last_end"]).clip(lower=0)
    spans["dur_ns"] = spans["last_end"] + spans["tail_ns"] - spans["start_ns"]
    ranks = spans.reset_index()[["step", "rank", "start_ns", "dur_ns", "tail_ns"]].astype(np.int64)
    frame["pos"] = by.cumcount()
    chain = by["collective"].agg("|".join).rename("chain")
    frame = frame.join(chain, on=["step", "rank"])
    frame["peer_key"] = pd.factorize(pd.MultiIndex.from_frame(frame[["step", "chain", "pos"]]))[0]
    rank_key = pd.factorize(pd.MultiIndex.from_frame(chain.reset_index()[["step", "chain"]]))[0]
    keys = pd.Series(rank_key, index=pd.MultiIndex.from_frame(chain.reset_index()[["step", "rank"]]))
    ranks["peer_key"] = keys.reindex(pd.MultiIndex.from_frame(ranks[["step", "rank"]])).fillna(-1).to_numpy(np.int64)
    nodes = frame[["instance", "step", "rank", "order", "local_ns", "transfer_ns", "wait_ns", "after_end",
                   "arrival_ns", "peer_key", "p2p", "post"]].reset_index(drop=True)
    return StepGraph(nodes, ranks)


def _p2p(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether its instance is a point-to-point pair (two members, a send and a recv:
    `collectives.match_instances`' pairs), and whether the row is the send of such a pair."""
    name = frame["collective"]
    inst = frame["instance"]
    pair = (name.isin(P2P_COLLECTIVES).groupby(inst).transform("all") & (name == "send").groupby(inst).transform("any")
            & (name == "recv").groupby(inst).transform("any") & (inst.groupby(inst).transform("size") == 2)
            ).to_numpy(bool)
    return pair, pair & (name == "send").to_numpy(bool)


def _step_spans(frame: pd.DataFrame, steps: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    """Per (step, rank): the profiler step's start on the aligned clock and its duration."""
    if steps is None or steps.empty:
        return pd.DataFrame(columns=["start_ns", "dur_ns"], index=pd.MultiIndex.from_arrays([[], []],
                                                                                          names=["step", "rank"]))
    prof = steps[steps["source"].astype(str) == "profiler"] if "source" in steps else steps
    per = prof.groupby(["step", "rank"]).agg(start_ns=("start_ns", "min"), dur_ns=("dur_ns", "max"))
    off = per.index.get_level_values("rank").map(lambda r: int(offsets.get(r, 0)) if len(offsets) else 0)
    per["start_ns"] = per["start_ns"] - np.asarray(off, dtype=np.int64)
    return per.astype(float)


def _empty_nodes() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in
                         ["instance", "step", "rank", "order", "local_ns", "transfer_ns", "wait_ns", "arrival_ns",
                          "peer_key"]}).assign(after_end=pd.Series(dtype=bool), p2p=pd.Series(dtype=bool),
                                               post=pd.Series(dtype=bool))


def replay(graph: StepGraph, local: np.ndarray | None = None, transfer: np.ndarray | None = None,
           tail: np.ndarray | None = None) -> Replay:
    """Replay `graph` with its durations, or with `local`/`transfer` (per node row) and `tail` (per rank row)."""
    nodes, ranks = graph.nodes, graph.ranks
    if nodes.empty:
        return Replay(pd.DataFrame(columns=["step", "rank", "measured_ns", "replayed_ns"]),
                      pd.DataFrame(columns=["instance", "step", "last_rank", "last_arrival_ns", "end_ns"]))
    loc = nodes["local_ns"].to_numpy(np.float64) if local is None else np.asarray(local, np.float64)
    xfer = _instance_transfer(nodes) if transfer is None else np.asarray(transfer, np.float64)
    tails = ranks["tail_ns"].to_numpy(np.float64) if tail is None else np.asarray(tail, np.float64)
    dag = graph.dag
    coll_xfer = np.array([xfer[rows].max() for _, _, _, rows, _ in dag.collectives], dtype=np.float64)
    start = ranks["start_ns"].to_numpy(np.float64)
    end = finish(((i,) for i in range(len(dag.preds))), dag.preds,
                 np.concatenate([start, loc, coll_xfer, tails])[dag.durations], 0.0)
    out_inst = []
    for here, step, node, _, by in dag.collectives:
        arrivals = [end[p] for p in dag.preds[node]]
        last = int(np.argmax(arrivals))
        out_inst.append((here, step, by[last], float(arrivals[last]), float(end[node])))
    measured = ranks["dur_ns"].to_numpy(np.float64)
    replayed = np.array(end[len(end) - len(ranks):], dtype=np.float64) - start
    steps = pd.DataFrame({"step": ranks["step"].to_numpy(), "rank": ranks["rank"].to_numpy(),
                          "measured_ns": measured, "replayed_ns": replayed})
    return Replay(steps, pd.DataFrame(out_inst, columns=["instance", "step", "last_rank", "last_arrival_ns", "end_ns"]))


@dataclass(frozen=True)
class StepDag:
    """The step graph as a DAG in topological order: per rank row its start, per node row its arrival (the local
    work after the rank's previous collective, or its previous arrival), per collective its end (the last arrival
    plus the transfer; a posted send has none), per rank row its end (plus the tail). `durations` places each DAG
    node's duration in [start per rank row, local per node row, transfer per collective, tail per rank row]."""

    preds: list[list[int]]
    durations: np.ndarray
    collectives: list[tuple[int, int, int, np.ndarray, list[int]]]  # instance, step, DAG node, node rows, pred ranks


def step_dag(graph: StepGraph) -> StepDag:
    """`graph`'s `StepDag`: each instance's members in completion order, a P2P pair's send posted before its recv."""
    nodes, ranks = graph.nodes, graph.ranks
    keys = list(zip(ranks["step"].to_numpy().tolist(), ranks["rank"].to_numpy().tolist()))
    ready = {w: i for i, w in enumerate(keys)}  # per (step, rank): the DAG node its next local work starts after
    last_arr = dict(ready)  # its previous arrival, for local work that overlapped its previous collective
    preds: list[list[int]] = [[] for _ in keys]
    durations = list(range(len(keys)))
    posted = nodes["post"].to_numpy(bool)
    order = nodes.assign(_post=posted).sort_values(["step", "order", "instance", "_post"], kind="stable")
    idx = order.index.to_numpy()
    inst = order["instance"].to_numpy()
    post = posted[idx]
    bounds = np.flatnonzero((np.diff(inst) != 0) | (np.diff(post.astype(np.int8)) != 0)) + 1
    step_col, rank_col = order["step"].to_numpy(), order["rank"].to_numpy()
    after = order["after_end"].to_numpy(bool)
    sent: dict[int, tuple[list[int], list[int]]] = {}  # a pair's instance -> its send's arrival node, the sender
    collectives: list[tuple[int, int, int, np.ndarray, list[int]]] = []
    for group in np.split(np.arange(len(idx)), bounds):
        rows = idx[group]
        who = [(int(step_col[g]), int(rank_col[g])) for g in group]
        arrive = list(range(len(preds), len(preds) + len(rows)))
        preds += [[ready[w] if after[g] else last_arr[w]] for w, g in zip(who, group)]
        durations += (len(keys) + rows).tolist()
        here = int(inst[group[0]])
        if post[group[0]]:  # a send posted: the sender goes on at once, the pair completes with its recv
            sent[here] = (arrive, [w[1] for w in who])
            ready.update(zip(who, arrive))
            last_arr.update(zip(who, arrive))
            continue
        also, by = sent.get(here, ([], []))
        collectives.append((here, who[0][0], len(preds), rows, [w[1] for w in who] + by))
        ready.update((w, len(preds)) for w in who)
        last_arr.update(zip(who, arrive))
        preds.append(arrive + also)
        durations.append(len(keys) + len(nodes) + len(collectives) - 1)
    preds += [[ready[w]] for w in keys]
    durations += range(len(keys) + len(nodes) + len(collectives), 2 * len(keys) + len(nodes) + len(collectives))
    return StepDag(preds, np.array(durations, dtype=np.int64), collectives)


def _instance_transfer(nodes: pd.DataFrame) -> np.ndarray:
    """The measured transfer of each node's instance: the members' median (OSDI'25's ideal communication;
    on aligned clocks every member's transfer is its end minus the last arrival, nearly equal); of a P2P pair,
    its recv's (a posted send's span runs to whenever its rank waited on it)."""
    xfer = nodes["transfer_ns"].astype(np.float64)
    of_recv = xfer.where(~nodes["post"].to_numpy(bool)).groupby(nodes["instance"]).transform("median")
    whole = xfer.groupby(nodes["instance"]).transform("median")
    return of_recv.fillna(whole).to_numpy(np.float64)


def idealize(graph: StepGraph, rank: int | None = None, local: np.ndarray | None = None,
             tail: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`local` and `tail` (the measured ones by default) with `rank`'s, or every rank's when None, set to the mean
    of its peers' at the same position (every rank's: with itself, OSDI'25's T_ideal; without peers: the members'
    at the same instance, a P2P node its own; a tail: the peers' in the step, else the step's)."""
    nodes, ranks = graph.nodes, graph.ranks
    loc = nodes["local_ns"].to_numpy(np.float64) if local is None else local
    tails = ranks["tail_ns"].to_numpy(np.float64) if tail is None else tail

    def mean_over(values: np.ndarray, frame: pd.DataFrame, by: str) -> np.ndarray:
        """Per row: the mean over its `by` group without `rank`'s rows; over peers, NaN for a group of one."""
        groups = pd.Series(np.where(frame["rank"].to_numpy() == rank, np.nan, values)).groupby(frame[by].to_numpy())
        mean = groups.transform("mean")
        return (mean.where(groups.transform("size") > 1) if by == "peer_key" else mean).to_numpy(np.float64)

    mine = (nodes["rank"].to_numpy() == rank) | (rank is None)
    rmine = (ranks["rank"].to_numpy() == rank) | (rank is None)
    peers, rpeers = mean_over(loc, nodes, "peer_key"), mean_over(tails, ranks, "peer_key")
    fallback = np.where(nodes["p2p"].to_numpy(bool), loc, mean_over(loc, nodes, "instance"))
    ideal = np.where(mine, np.where(np.isnan(peers), fallback, peers), loc)
    ideal_tail = np.where(rmine, np.where(np.isnan(rpeers), mean_over(tails, ranks, "step"), rpeers), tails)
    return np.nan_to_num(ideal, nan=0.0), np.nan_to_num(ideal_tail, nan=0.0)


def slowdown(graph: StepGraph) -> tuple[float, float]:
    """(S, waste): S = T_replayed / T_ideal, waste = 1 - 1/S (OSDI'25)."""
    base = replay(graph).mean_step_ns()
    loc, tails = idealize(graph)
    ideal = replay(graph, local=loc, tail=tails).mean_step_ns()
    if ideal <= 0 or base <= 0:
        return 1.0, 0.0
    s = base / ideal
    return s, 1.0 - 1.0 / s


def with_transfer(graph: StepGraph, exposed_share: pd.Series) -> np.ndarray:
    """Each instance's median transfer times one minus the largest exposed share of its members (a transfer
    hidden under compute costs the step nothing; the rest stays)."""
    nodes = graph.nodes
    share = nodes["rank"].map(exposed_share).fillna(1.0).clip(0.0, 1.0)
    inst_share = share.groupby(nodes["instance"]).transform("max").to_numpy(np.float64)
    return _instance_transfer(nodes) * (1.0 - inst_share)



FIX_RANKS_MAX = 16  # ranks `fix_each_rank` replays (those with the most work above their peers')


def fix_each_rank(graph: StepGraph, limit: int = FIX_RANKS_MAX) -> pd.DataFrame:
    """Per rank (the `limit` ranks with the most local work above their peers'): `saved_ns`, how much shorter
    the mean step gets when only that rank's work is its peers' ("fix worker w"), and `s_w`, OSDI'25's S_w:
    the mean step with every other rank ideal and this one as measured, over T_ideal."""
    cols = ["rank", "excess_ns", "saved_ns", "s_w"]
    nodes = graph.nodes
    if nodes.empty:
        return pd.DataFrame(columns=cols)
    measured = nodes["local_ns"].to_numpy(np.float64)
    tails = graph.ranks["tail_ns"].to_numpy(np.float64)
    ideal_loc, ideal_tail = idealize(graph)
    base = replay(graph).mean_step_ns()
    t_ideal = replay(graph, local=ideal_loc, tail=ideal_tail).mean_step_ns()
    excess = pd.Series(measured - ideal_loc).groupby(nodes["rank"].to_numpy()).sum().sort_values(ascending=False)
    rows = []
    for rank in excess.index[:limit]:
        loc, tl = idealize(graph, int(rank))
        fixed = replay(graph, local=loc, tail=tl).mean_step_ns()
        mine, rmine = nodes["rank"].to_numpy() == rank, graph.ranks["rank"].to_numpy() == rank
        only = replay(graph, local=np.where(mine, measured, ideal_loc),
                      tail=np.where(rmine, tails, ideal_tail)).mean_step_ns()
        rows.append((int(rank), float(excess[rank]), max(base - fixed, 0.0), only / t_ideal if t_ideal > 0 else 1.0))
    return pd.DataFrame(rows, columns=cols)
