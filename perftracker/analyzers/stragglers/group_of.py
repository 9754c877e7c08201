"""Which process group each collective event ran in, where the event itself does not say.

`fill_groups(candidates, groups)` fills `pg` from record_param_comms, gloo's per-group worker threads and P2P
peers; events whose group cannot be known keep pg "". `order_keys(coll)` orders each group's collectives (Seq, else
the k-th of that name) and `realign(coll)` shifts or refuses members that disagree on the message size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.store.run_info import ProcessGroup

P2P_COLLECTIVES = ("send", "recv")
_TOLERANCE = 0.01  # relative size difference still taken as the same message
_MIN_AGREE = 0.9  # share of a shifted sequence's overlap that must agree
_MAX_SHIFT = 256  # collectives a rank may have dropped (or gained) at the start of a group's step
_UNSIZED = ("all_to_all", "send", "recv")


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
    tid_of = cand["tid"].to_numpy()
    for i in np.flatnonzero(coll.to_numpy()):
        name = chosen.get(int(rank_of[i]), {}).get(int(tid_of[i]))
        if name is not None:
            pg[i] = name
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


@dataclass
class Alignment:
    """What the check found: instances whose members disagreed, events realigned and events refused."""

    mismatched: int = 0
    realigned: int = 0
    refused: int = 0
    by_seq: int = 0  # events ordered by their group's own sequence number
    groups: tuple[str, ...] = ()  # the groups (pg names) where members disagreed


def order_keys(coll: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """`coll` with `k` (docs/internals/stepgraph.md) and `order` ("seq" or "position"); and how many use Seq."""
    coll = coll.sort_values(["rank", "window", "start_ns"], kind="stable")
    k = coll.groupby(["rank", "pg", "collective", "step"], sort=False, observed=True).cumcount().to_numpy()
    seq = coll["seq"].to_numpy() if "seq" in coll else np.full(len(coll), -1)
    with_seq = pd.Series(seq >= 0, index=coll.index).groupby(coll["pg"]).transform("all").to_numpy(dtype=bool)
    with_seq = with_seq & (coll["pg"].astype(str).to_numpy() != "")
    if with_seq.any():  # a group whose numbers do not name one collective (a counter shared with P2P): by position
        named = coll[with_seq].groupby(["pg", "seq"], observed=True)["collective"].transform("nunique")
        odd = set(coll.loc[named.index[named.to_numpy() > 1], "pg"].astype(str))
        if odd:
            with_seq = with_seq & ~coll["pg"].astype(str).isin(odd).to_numpy()
    out = coll.assign(k=np.where(with_seq, seq, k), by_seq=with_seq)
    return out, int(with_seq.sum())


def instance_keys(coll: pd.DataFrame) -> list[pd.Series]:
    """The columns one instance shares: (pg, collective, step, k), or (pg, k) where k is the group's Seq."""
    step = coll["step"].where(~coll["by_seq"], -2)
    name = coll["collective"].astype(str).where(~coll["by_seq"], "")
    return [coll["pg"], name, step, coll["k"]]


def realign(coll: pd.DataFrame) -> tuple[pd.DataFrame, Alignment]:
    """Realign or refuse the members of instances that disagree on size (docs/internals/stepgraph.md)."""
    report = Alignment()
    if coll.empty:
        return coll, report
    inst = coll.groupby(instance_keys(coll), sort=False, observed=True).ngroup().to_numpy()
    size = coll["bytes"].to_numpy().astype(np.float64)
    sized = (size > 0) & ~coll["collective"].isin(_UNSIZED).to_numpy()
    lo = pd.Series(np.where(sized, size, np.inf)).groupby(inst).transform("min").to_numpy()
    hi = pd.Series(np.where(sized, size, -np.inf)).groupby(inst).transform("max").to_numpy()
    bad_row = sized & (hi > lo * (1 + _TOLERANCE))
    if not bad_row.any():
        return coll, report
    bad_inst = np.unique(inst[bad_row])
    report.mismatched = len(bad_inst)
    in_bad = np.isin(inst, bad_inst)
    blocks = coll.loc[in_bad, ["pg", "step"]].drop_duplicates()
    report.groups = tuple(sorted({str(p) for p in blocks["pg"]}))[:16]
    keep = np.ones(len(coll), dtype=bool)
    k = coll["k"].to_numpy().copy()
    name = coll["collective"].astype(str).to_numpy()
    pos_of = {i: n for n, i in enumerate(coll.index)}
    for _, block in coll[coll["pg"].isin(blocks["pg"]) & coll["step"].isin(blocks["step"])].groupby(
            ["pg", "step"], sort=False, observed=True):
        per_rank = {int(str(r)): part.sort_values("start_ns", kind="stable") for r, part in block.groupby("rank")}
        ref_rank = max(per_rank, key=lambda r: (len(per_rank[r]), -r))
        ref = per_rank[ref_rank]
        ref_name, ref_size = ref["collective"].astype(str).to_numpy(), ref["bytes"].to_numpy().astype(np.float64)
        for part in per_rank.values():
            rows = np.array([pos_of[i] for i in part.index])
            shift, agree = _best_shift(name[rows], size[rows], ref_name, ref_size)
            if shift is None:
                keep[rows] = False
                report.refused += len(rows)
                continue
            k[rows] = np.arange(len(rows)) + shift + 10**9  # positions in the reference's order (apart from k)
            keep[rows[~agree]] = False
            report.refused += int((~agree).sum())
            if shift:
                report.realigned += int(agree.sum())
    out = coll.assign(k=k)
    return out[keep].reset_index(drop=True), report


def _best_shift(name: np.ndarray, size: np.ndarray, ref_name: np.ndarray,
                ref_size: np.ndarray) -> tuple[int | None, np.ndarray]:
    """The shift d (this sequence's i-th = the reference's (i+d)-th) with the most agreement, and which of its
    events agree; None when no shift reaches `_MIN_AGREE` of the overlap."""
    n, m = len(name), len(ref_name)
    best: tuple[int, int] | None = None
    best_agree = np.zeros(n, dtype=bool)
    for d in range(-min(n - 1, _MAX_SHIFT), min(m - 1, _MAX_SHIFT) + 1):
        i0, i1 = max(0, -d), min(n, m - d)
        if i1 <= i0:
            continue
        a_name, b_name = name[i0:i1], ref_name[i0 + d:i1 + d]
        a_size, b_size = size[i0:i1], ref_size[i0 + d:i1 + d]
        same = (a_name == b_name) & ((a_size <= 0) | (b_size <= 0)
                                     | (np.abs(a_size - b_size) <= _TOLERANCE * np.maximum(a_size, b_size)))
        score = int(same.sum())
        if score >= _MIN_AGREE * (i1 - i0) and (best is None or score > best[1]):
            best = (d, score)
            best_agree = np.zeros(n, dtype=bool)
            best_agree[i0:i1] = same
    return (None, best_agree) if best is None else (best[0], best_agree)
