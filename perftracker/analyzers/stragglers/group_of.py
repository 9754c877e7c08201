"""Which process group each collective event ran in, where the event itself does not say.

`fill_groups(candidates, groups)` fills `pg` from record_param_comms, gloo's per-group worker threads and P2P
peers; events whose group cannot be known keep pg "".
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from perftracker.store.run_info import ProcessGroup

P2P_COLLECTIVES = ("send", "recv")


def fill_groups(cand: pd.DataFrame, groups: dict[str, ProcessGroup]) -> pd.DataFrame:
    """`cand` (collective events of every source, with `tid`, `source`, `pg`, `peer`, `concrete_inputs`) with
    `pg` and `peer` filled where they can be (docs/internals/stepgraph.md)."""
    if cand.empty:
        return cand
    cand = cand.copy()
    cand["pg"] = cand["pg"].astype(str)
    cand["splits"] = _c10d_splits(cand)
    cand = _inherit(cand)
    if groups:
        cand = _by_thread(cand, groups)
        cand = _peers(cand, groups)
    return cand


def _inherit(cand: pd.DataFrame) -> pd.DataFrame:
    """Events without a group take that of the record_param_comms whose span overlaps theirs on their thread."""
    rpc = cand[(cand["source"] == "record_param_comms") & (cand["pg"] != "")]
    need = (cand["pg"] == "") & cand["source"].isin(["gloo", "c10d", "nccl_annotation"])
    if rpc.empty or not need.any():
        return cand
    pg = cand["pg"].to_numpy(dtype=object)
    parents_of = {key: part for key, part in rpc.groupby(["rank", "tid"], sort=False)}
    at = np.arange(len(cand))
    for key, part in pd.Series(at[need.to_numpy()]).groupby(
            [cand["rank"].to_numpy()[need.to_numpy()], cand["tid"].to_numpy()[need.to_numpy()]], sort=False):
        parents = parents_of.get(key)
        if parents is None:
            continue
        rows = part.to_numpy()
        parents = parents.sort_values("start_ns")
        p_start = parents["start_ns"].to_numpy()
        p_end = p_start + parents["dur_ns"].to_numpy()
        p_pg = parents["pg"].to_numpy(dtype=object)
        start = cand["start_ns"].to_numpy()[rows]
        end = start + cand["dur_ns"].to_numpy()[rows]
        # the last parent starting at or before the event's end; it must overlap the event
        i = np.searchsorted(p_start, end, side="right") - 1
        ok = (i >= 0) & (p_end[np.clip(i, 0, None)] >= start)
        pg[rows[ok]] = p_pg[i[ok]]
    return cand.assign(pg=pg)


def _creation_order(groups: dict[str, ProcessGroup]) -> list[ProcessGroup]:
    """Groups in creation order: default names are counters ("0", "1", ...); others keep the inputs' order."""
    listed = list(groups.values())
    return sorted(listed, key=lambda g: (0, int(g.name), 0) if g.name.isdigit() else (1, 0, listed.index(g)))


def _by_thread(cand: pd.DataFrame, groups: dict[str, ProcessGroup]) -> pd.DataFrame:
    """gloo collectives without a group: their group from the worker thread they ran on."""
    coll = (cand["source"] == "gloo") & (cand["pg"] == "") & ~cand["collective"].isin(P2P_COLLECTIVES)
    if not coll.any():
        return cand
    ordered = [g for g in _creation_order(groups) if len(g.ranks) >= 2]
    pg = cand["pg"].to_numpy(dtype=object)
    rank_of = cand["rank"].to_numpy()
    single: dict[int, str] = {}
    for r in np.unique(rank_of[coll.to_numpy()]).tolist():
        names = [g.name for g in ordered if r in g.ranks]
        if len(names) == 1:  # a rank in one group: all its collectives run there (no thread to tell apart)
            single[int(r)] = names[0]
    if single:
        at = coll.to_numpy() & np.isin(rank_of, list(single))
        pg[at] = pd.Series(rank_of[at]).map(single).to_numpy()
        coll = coll & ~at
        if not coll.any():
            return cand.assign(pg=pg)
    rows = cand[coll]
    keys = rows["collective"].astype(str) + ":" + rows["bytes"].astype(str)
    # per rank: classes of threads (threads sharing a (collective, bytes) run one group's work)
    classes: dict[int, list[tuple[list[int], frozenset[str]]]] = {}
    keyed = rows.assign(key=keys.to_numpy(), end_ns=rows["start_ns"] + rows["dur_ns"])
    for rank, part in keyed.groupby("rank", sort=True):
        per_tid = {int(str(t)): frozenset(k) for t, k in part.groupby("tid")["key"].agg(set).items()}
        merged: list[tuple[list[int], set[str]]] = []
        for tid in sorted(per_tid):
            joined = [m for m in merged if m[1] & per_tid[tid]]
            tids, kinds = [tid], set(per_tid[tid])
            for m in joined:
                tids += m[0]
                kinds |= m[1]
                merged.remove(m)
            merged.append((sorted(tids), kinds))
        classes[int(str(rank))] = sorted(((t, frozenset(k)) for t, k in merged), key=lambda c: c[0][0])
    mine = {r: [g for g in ordered if r in g.ranks] for r in classes}
    chosen: dict[int, dict[int, str]] = {}
    for r, cls in classes.items():
        options = mine[r]
        if not options:
            continue
        if len(options) == 1:
            names = [options[0].name] * len(cls)
        elif len(cls) == len(options):  # one class per group: in creation order
            names = [g.name for g in options]
        else:
            names = _pick(r, cls, options, classes, keyed)
        chosen[r] = {tid: name for (tids, _), name in zip(cls, names) for tid in tids}
    if not chosen:
        return cand.assign(pg=pg)
    idx = np.flatnonzero(coll.to_numpy())
    at_rank = cand["rank"].to_numpy()[idx].tolist()
    at_tid = cand["tid"].to_numpy()[idx].tolist()
    for j, (r, t) in enumerate(zip(at_rank, at_tid)):
        name = chosen.get(int(r), {}).get(int(t))
        if name is not None:
            pg[idx[j]] = name
    return cand.assign(pg=pg)


def _pick(rank: int, cls: list[tuple[list[int], frozenset[str]]], options: list[ProcessGroup],
          classes: dict[int, list[tuple[list[int], frozenset[str]]]], keyed: pd.DataFrame) -> list[str]:
    """Groups for a rank's thread classes (fewer than its groups): each class the largest group, among those whose
    other members all run the same kinds of collective, that one clock can explain (`_impossible`: a collective
    ends on no member before its last member began it; two sub-groups' collectives taken as one often do);
    the smallest such group when none can."""
    names: list[str] = []
    for _, kinds in cls:
        fits = [g for g in options if all(any(k & kinds for _, k in classes.get(m, [])) for m in g.ranks if m != rank)]
        share = {g.name: _impossible(keyed, g.ranks, kinds) for g in fits or options}
        ranked = sorted(fits or options, key=lambda g: (len(g.ranks), 1.0 if share[g.name] is None else share[g.name]))
        pick = ranked[0]
        for g in ranked[1:]:  # a larger group holding the pick, if one clock explains it
            found = share[g.name]
            if set(pick.ranks) < set(g.ranks) and found is not None and found <= _IMPOSSIBLE_SHARE:
                pick = g
        names.append(pick.name)
    return names


# share of matched collectives that may end before their last member began: one group's gloo all_to_all on an
# oversubscribed CPU shows up to 25% (uneven receives, late worker threads); sub-groups taken as one, most
_IMPOSSIBLE_SHARE = 0.5
_SLACK_NS = 100_000  # an end this much before the last start is still taken as at once


def _impossible(keyed: pd.DataFrame, members: tuple[int, ...], kinds: frozenset[str]) -> float | None:
    """The share of collectives, matched by kind and order among `members`, that end on some member before another
    member began them (each rank's clock shifted by its median end offset); None when none is matched."""
    rows = keyed[keyed["rank"].isin(members) & keyed["key"].isin(kinds)].sort_values("start_ns", kind="stable")
    if rows.empty:
        return None
    rows = rows.assign(k=rows.groupby(["rank", "key", "step"], sort=False).cumcount().to_numpy())
    index = ["key", "step", "k"]
    ends = rows.pivot_table(index=index, columns="rank", values="end_ns", aggfunc="first").dropna()
    starts = rows.pivot_table(index=index, columns="rank", values="start_ns", aggfunc="first").reindex(ends.index)
    if ends.empty or ends.shape[1] < len(members):
        return None
    end = ends.to_numpy(dtype=np.float64)
    offset = np.median(end - np.median(end, axis=1, keepdims=True), axis=0, keepdims=True)
    end = end - offset
    start = starts[ends.columns].to_numpy(dtype=np.float64) - offset
    return float((end.min(axis=1) < start.max(axis=1) - _SLACK_NS).mean())


def _peers(cand: pd.DataFrame, groups: dict[str, ProcessGroup]) -> pd.DataFrame:
    """P2P ops without a global peer: c10d::send / recv_'s group-rank argument, through the group in which the
    peer posts the opposite op naming this rank's group rank (the default group first)."""
    p2p = cand["collective"].isin(P2P_COLLECTIVES).to_numpy()
    local = np.full(len(cand), -1, dtype=np.int64)
    texts = cand["concrete_inputs"].astype(str).to_numpy() if "concrete_inputs" in cand else np.array([""] * len(cand))
    need = p2p & (cand["peer"].to_numpy() < 0) & (cand["source"].to_numpy() == "c10d")
    for i in np.flatnonzero(need):
        local[i] = _local_peer(str(texts[i]))
    if not (local >= 0).any():
        return cand
    ranks = cand["rank"].to_numpy()
    kinds = cand["collective"].astype(str).to_numpy()
    posted = {(int(r), k, int(q)) for r, k, q in zip(ranks[local >= 0], kinds[local >= 0], local[local >= 0])}
    by_size = sorted(groups.values(), key=lambda g: -len(g.ranks))
    resolved: dict[tuple[int, str, int], int] = {}
    for r, k, q in posted:
        other = "recv" if k == "send" else "send"
        for g in by_size:
            if r not in g.ranks or q >= len(g.ranks):
                continue
            peer = g.ranks[q]
            if peer != r and (peer, other, g.ranks.index(r)) in posted:
                resolved[(r, k, q)] = peer
                break
    peer_col = cand["peer"].to_numpy().copy()
    for i in np.flatnonzero(local >= 0):
        found = resolved.get((int(ranks[i]), str(kinds[i]), int(local[i])))
        if found is not None:
            peer_col[i] = found
    return cand.assign(peer=peer_col)


def _c10d_splits(cand: pd.DataFrame) -> pd.Series:
    """The splits column, with c10d::alltoall_base_'s own arguments (Concrete Inputs [out, in, pg, '[out splits]',
    '[in splits]', ...]) as '[[in splits],[out splits]]' where no record_param_comms gave them."""
    splits = cand["splits"].astype(str) if "splits" in cand else pd.Series("", index=cand.index)
    need = (cand["collective"] == "all_to_all") & (cand["source"] == "c10d") & (splits == "")
    if not need.any() or "concrete_inputs" not in cand:
        return splits
    texts = cand.loc[need, "concrete_inputs"].astype(str)
    parsed = {text: _split_args(text) for text in texts.unique()}
    return splits.where(~need, texts.map(parsed)).fillna("")


def _split_args(text: str) -> str:
    try:
        values = json.loads(text) if text else []
        sides = [json.loads(values[4]), json.loads(values[3])] if isinstance(values, list) and len(values) > 4 else []
    except (ValueError, TypeError):
        return ""
    ok = len(sides) == 2 and all(isinstance(v, list) and all(isinstance(x, int) for x in v) for v in sides)
    return json.dumps(sides, separators=(",", ":")) if ok and any(sides) else ""


def _local_peer(text: str) -> int:
    """The peer (a group rank) of c10d::send / recv_ from its Concrete Inputs ['', '', '<peer>', '<tag>']."""
    try:
        values = json.loads(text) if text else []
    except ValueError:
        return -1
    if isinstance(values, list) and len(values) >= 3 and isinstance(values[2], str) and values[2].isdigit():
        return int(values[2])
    return -1

