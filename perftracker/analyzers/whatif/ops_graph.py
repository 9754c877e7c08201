"""The dependency graph of a pipeline-parallel step, from per-operation records (the OSDI'25 artifact's format).

`build(ops)` turns the `pipeline_ops` table into an `OpsGraph`: template nodes per (stage, optype, seq_id) shared by
every (step, replica) column, their dependencies and communication groups in topological order, and the
transfer durations; raises `GraphError` when the records form no acyclic step.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.stepgraph.dag import topological

FWD, BWD = "forward-compute", "backward-compute"
P2P = ("forward-send", "forward-recv", "backward-send", "backward-recv")
DP_COMM = ("params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce")
LAYERNORM, EMBEDDING, CLIP, OPTIMIZER, GC = ("layernorm-grads-all-reduce", "embedding-grads-all-reduce",
                                              "optimizer-clip-main-grad", "optimizer", "gc")
KNOWN = (FWD, BWD, *P2P, *DP_COMM, LAYERNORM, EMBEDDING, CLIP, OPTIMIZER, GC)
# Conceptually communication: ideal duration is the median (OSDI'25); the rest are compute (mean).
COMM_TYPES = frozenset((*P2P, *DP_COMM, LAYERNORM, EMBEDDING, CLIP))
NEG_TRANSFER_NS = 10_000_000  # a transfer below -10 ms is a clock artifact: set to 0 (as the artifact does)


class GraphError(ValueError):
    """The records do not form one acyclic pipeline step (the message says why)."""


@dataclass(frozen=True)
class OpsGraph:
    """Template nodes (`nodes`: stage, optype, seq_id, mc), columns (`cols`: step, dp_rank), matrices
    node x column, dependencies, groups in topological order, and what was left out."""

    nodes: pd.DataFrame
    cols: pd.DataFrame
    dur: np.ndarray
    transfer: np.ndarray
    deps: tuple[tuple[int, ...], ...]  # per node: the nodes it waits for
    groups: tuple[tuple[int, ...], ...]  # in topological order; a local op is a group of one
    comm: np.ndarray  # per group: bool, its members end at the group's last start + their transfer
    sync: np.ndarray  # per group: bool, the group also waits for every replica of the step
    n_dp: int
    n_steps: int
    measured: np.ndarray  # per kept step: first start to last end over every worker (ns)
    dropped_steps: tuple[int, ...]
    unknown: tuple[str, ...]

    @property
    def stages(self) -> np.ndarray:
        return self.nodes["stage"].to_numpy()


def build(ops: pd.DataFrame) -> OpsGraph:
    """The `OpsGraph` of `ops` (docs/internals/stepgraph.md); raises `GraphError` when nothing fits."""
    unknown = tuple(sorted(set(ops["optype"].astype(str)) - set(KNOWN)))
    ops = ops[ops["optype"].astype(str).isin(KNOWN)]
    if ops.empty:
        raise GraphError("no operation of a known type (forward-compute, backward-compute, ...)")
    frame = pd.DataFrame({"stage": ops["stage"].to_numpy(np.int64), "optype": ops["optype"].astype(str).to_numpy(),
                          "seq_id": ops["seq_id"].to_numpy(np.int64), "dp_rank": ops["dp_rank"].to_numpy(np.int64),
                          "step": ops["step"].to_numpy(np.int64), "mc": ops["mc"].to_numpy(np.int64),
                          "start": ops["start_ns"].to_numpy(np.float64), "dur": ops["dur_ns"].to_numpy(np.float64)})
    frame = frame.drop_duplicates(["step", "dp_rank", "stage", "optype", "seq_id"])
    n_dp = int(frame["dp_rank"].max()) + 1
    node_keys = frame[["stage", "optype", "seq_id"]].drop_duplicates().sort_values(["stage", "optype", "seq_id"])
    nodes = node_keys.reset_index(drop=True)
    node_id = pd.MultiIndex.from_frame(nodes).get_indexer(pd.MultiIndex.from_frame(frame[["stage", "optype",
                                                                                           "seq_id"]]))
    steps = np.sort(frame["step"].unique())
    col_id = np.searchsorted(steps, frame["step"].to_numpy()) * n_dp + frame["dp_rank"].to_numpy()
    n_cols = len(steps) * n_dp
    full = np.zeros((len(nodes), n_cols), dtype=bool)
    full[node_id, col_id] = True
    complete_step = full.reshape(len(nodes), len(steps), n_dp).all(axis=(0, 2))
    if not complete_step.any():
        raise GraphError("no step in which every replica ran the same operations")
    keep_cols = np.repeat(complete_step, n_dp)
    start = np.full((len(nodes), n_cols), np.nan)
    dur = np.full((len(nodes), n_cols), np.nan)
    start[node_id, col_id] = frame["start"].to_numpy()
    dur[node_id, col_id] = frame["dur"].to_numpy()
    start, dur = start[:, keep_cols], dur[:, keep_cols]
    kept = steps[complete_step]
    cols = pd.DataFrame({"step": np.repeat(kept, n_dp), "dp_rank": np.tile(np.arange(n_dp), len(kept))})
    first = frame[(frame["step"] == kept[0]) & (frame["dp_rank"] == 0)]
    mc = first.set_index(["stage", "optype", "seq_id"])["mc"]
    nodes["mc"] = mc.reindex(pd.MultiIndex.from_frame(nodes[["stage", "optype", "seq_id"]])).to_numpy(np.int64)
    nodes["t0"] = start[:, 0]
    deps, group_list, sync_set = _dependencies(nodes, n_dp)
    groups, comm, sync = _order(deps, group_list, sync_set, nodes)
    transfer = _transfer(groups, comm, sync, start, start + dur, len(kept), n_dp)
    span = (start + dur).max(axis=0).reshape(len(kept), n_dp).max(axis=1)
    measured = span - start.min(axis=0).reshape(len(kept), n_dp).min(axis=1)
    return OpsGraph(nodes.drop(columns="t0"), cols, dur, transfer, deps, groups, comm, sync, n_dp, len(kept),
                    measured, tuple(int(s) for s in steps[~complete_step]), unknown)


def _dependencies(nodes: pd.DataFrame, n_dp: int
                  ) -> tuple[tuple[tuple[int, ...], ...], list[tuple[int, ...]], set[tuple[int, ...]]]:
    """Per node its dependencies; the communication groups (more than one member, or one synchronized across
    replicas); which of them are synchronized across replicas."""
    deps: dict[int, list[int]] = defaultdict(list)
    index = {(int(s), str(o), int(q)): i for i, (s, o, q) in
             enumerate(zip(nodes["stage"], nodes["optype"], nodes["seq_id"]))}
    groups: list[tuple[int, ...]] = []
    synced: set[tuple[int, ...]] = set()
    n_stages = int(nodes["stage"].max()) + 1
    use_dp = n_dp > 1
    overlap_dp = bool((nodes["optype"] == "separate-grads-all-reduce").any())
    seq = nodes["seq_id"].to_numpy(np.int64)
    for stage in range(n_stages):
        here = nodes[nodes["stage"] == stage].sort_values(["t0", "seq_id", "optype"], kind="stable")
        comp = here[here["optype"].isin((FWD, BWD))]
        order = comp.index.to_list()
        _chain(deps, order)
        for kind in P2P:
            _chain(deps, here[here["optype"] == kind].sort_values("seq_id").index.to_list())
        for i in here[here["optype"].isin(P2P)].index:  # send after its compute; compute after its recv, after the last
            direction, verb = str(nodes.at[i, "optype"]).split("-")
            mine, prev = (index.get((stage, f"{direction}-compute", int(seq[i]) - d)) for d in (0, 1))
            if mine is not None and verb == "send":
                deps[i].append(mine)
            elif mine is not None:
                deps[mine].append(i)
                deps[i] += [prev] if prev is not None else []
        first_bwd = next((k for k, i in enumerate(order) if nodes.at[i, "optype"] == BWD), -1)
        if first_bwd >= 2:
            for kind in ("backward-send", "backward-recv"):
                j = index.get((stage, kind, 0))
                if j is not None:
                    deps[j].append(order[first_bwd - 2])
        dp_ops = here[here["optype"].isin(DP_COMM)]
        if use_dp:
            _chain(deps, dp_ops.index.to_list())
            _per_chunk(deps, here, comp, before=True)
            groups += [(int(i),) for i in dp_ops.index]
            synced.update((int(i),) for i in dp_ops.index)
        last_compute = int(comp.index[-1]) if len(comp) else -1
        gc = index.get((stage, GC, 0), -1)
        tail: list[int] = []
        if gc >= 0 and last_compute >= 0:
            deps[gc].append(last_compute)
        if overlap_dp and use_dp:
            rs = here[here["optype"] == "grads-reduce-scatter"]
            if len(rs):
                tail.append(int(rs.index[-1]))
            _per_chunk(deps, here, comp, before=False)
        tail.append(gc if gc >= 0 else last_compute)
        for j in _post_chain(here, stage, n_stages, use_dp, overlap_dp):
            deps[j].extend(t for t in tail if t >= 0)
            tail = [j]
    for (stage, kind, q), i in index.items():  # a send and the next (forward) or previous stage's recv: one group
        peer = (stage + (1 if kind.startswith("forward") else -1), kind.replace("send", "recv"), q)
        groups += [(i, index[peer])] if kind.endswith("send") and peer in index else []
    emb = tuple(i for i in (index.get((0, EMBEDDING, 0)), index.get((n_stages - 1, EMBEDDING, 0))) if i is not None)
    if emb:
        groups.append(tuple(dict.fromkeys(emb)))
    clip = tuple(i for s in range(n_stages) if (i := index.get((s, CLIP, 0))) is not None)
    if clip:
        groups.append(clip)
        if use_dp:
            synced.add(clip)
    return tuple(tuple(deps.get(i, ())) for i in range(len(nodes))), groups, synced


def _chain(deps: dict[int, list[int]], order: list[int]) -> None:
    for a, b in zip(order, order[1:]):
        deps[b].append(a)


def _per_chunk(deps: dict[int, list[int]], here: pd.DataFrame, comp: pd.DataFrame, before: bool) -> None:
    """Per model chunk: its last params all-gather precedes its first forward (`before`), or, with overlapped DP
    communication, its first grads reduce-scatter follows its last backward."""
    kind, compute = ("params-all-gather", FWD) if before else ("grads-reduce-scatter", BWD)
    for mc, rows in here[here["optype"] == kind].sort_values("seq_id").groupby("mc"):
        mine = comp[(comp["optype"] == compute) & (comp["mc"] == mc)]
        if len(mine) and before:
            deps[int(mine.index[0])].append(int(rows.index[-1]))
        elif len(mine):
            deps[int(rows.index[0])].append(int(mine.index[-1]))


def _post_chain(here: pd.DataFrame, stage: int, n_stages: int, use_dp: bool, overlap_dp: bool) -> list[int]:
    """The ops after the last compute of a stage, in their dependency order."""
    def of(kind: str) -> list[int]:
        return [int(i) for i in here[here["optype"] == kind].sort_values("seq_id").index]

    chain = of(LAYERNORM) + (of(EMBEDDING) if stage in (0, n_stages - 1) else [])
    if use_dp:
        chain += of("separate-grads-all-reduce") if overlap_dp else of("grads-reduce-scatter")
    return chain + of(CLIP) + of(OPTIMIZER)


def _order(deps: tuple[tuple[int, ...], ...], groups: list[tuple[int, ...]], synced: set[tuple[int, ...]],
           nodes: pd.DataFrame) -> tuple[tuple[tuple[int, ...], ...], np.ndarray, np.ndarray]:
    """Every node in one group (a local op alone); the groups in topological order (Kahn's algorithm)."""
    n = len(nodes)
    owner = np.full(n, -1)
    all_groups: list[tuple[int, ...]] = []
    is_comm: list[bool] = []
    for members in groups:
        if any(owner[i] >= 0 for i in members):
            continue
        owner[list(members)] = len(all_groups)
        all_groups.append(members)
        is_comm.append(True)
    for i in range(n):
        if owner[i] < 0:
            owner[i] = len(all_groups)
            all_groups.append((i,))
            is_comm.append(str(nodes.at[i, "optype"]) in COMM_TYPES and str(nodes.at[i, "optype"]) != LAYERNORM)
    preds: list[set[int]] = [set() for _ in all_groups]
    for i, d in enumerate(deps):
        preds[owner[i]].update(int(owner[j]) for j in d if owner[j] != owner[i])
    order, stuck = topological(preds)
    if stuck:
        names = [f"{nodes['optype'].iat[i]!s}#{nodes['seq_id'].iat[i]}@stage{nodes['stage'].iat[i]}"
                 for i in (all_groups[h][0] for h in stuck[:3])]
        raise GraphError(f"the dependencies form a cycle (around {', '.join(names)}): the schedule is not one "
                         "this model knows")
    sync_set = {tuple(g) for g in synced}
    return (tuple(all_groups[g] for g in order), np.array([is_comm[g] for g in order], dtype=bool),
            np.array([all_groups[g] in sync_set for g in order], dtype=bool))


def step_max(values: np.ndarray, n_steps: int, n_dp: int) -> np.ndarray:
    """Per column: the maximum over the replicas of its step (columns are step-major)."""
    per = values.reshape(n_steps, n_dp).max(axis=1)
    return np.repeat(per, n_dp)


def _transfer(groups: tuple[tuple[int, ...], ...], comm: np.ndarray, sync: np.ndarray, start: np.ndarray,
              end: np.ndarray, n_steps: int, n_dp: int) -> np.ndarray:
    """Per node x column: end minus the last start of the node's group (0 for local ops)."""
    out = np.zeros_like(start)
    for g, members, is_sync in zip(range(len(groups)), groups, sync):
        if not comm[g]:
            continue
        idx = list(members)
        last = start[idx].max(axis=0)
        if is_sync:
            last = step_max(last, n_steps, n_dp)
        xfer = end[idx] - last
        xfer[xfer <= -NEG_TRANSFER_NS] = 0.0
        out[idx] = xfer
    return out
