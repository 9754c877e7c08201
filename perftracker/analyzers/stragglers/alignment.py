"""Collectives matched by position must be the same collective: detect when they are not, realign or refuse.

`order_keys(coll)` orders each group's collectives (Seq, else the k-th of that name); `realign(coll)` shifts or
refuses members that disagree on the message size; `Alignment` counts what was realigned and refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

_TOLERANCE = 0.01  # relative size difference still taken as the same message
_MIN_AGREE = 0.9  # share of a shifted sequence's overlap that must agree
_MAX_SHIFT = 256  # collectives a rank may have dropped (or gained) at the start of a group's step
_UNSIZED = ("all_to_all", "send", "recv")


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
