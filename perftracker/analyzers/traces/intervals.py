"""Interval arithmetic on int64 nanosecond arrays: union, total length, intersection length."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]


def union(starts: Ints, ends: Ints) -> tuple[Ints, Ints]:
    """Merge possibly overlapping intervals into sorted, disjoint ones."""
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy()
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    group_id = np.cumsum(new_group) - 1
    merged_s = s[new_group]
    merged_e = np.zeros(len(merged_s), dtype=np.int64)
    np.maximum.at(merged_e, group_id, e)
    return merged_s, merged_e


def total(starts: Ints, ends: Ints) -> int:
    """Total length of disjoint intervals."""
    return int((ends - starts).sum())


def intersection_total(a_s: Ints, a_e: Ints, b_s: Ints, b_e: Ints) -> int:
    """Length of the intersection of two sets of disjoint, sorted intervals."""
    if len(a_s) == 0 or len(b_s) == 0:
        return 0
    # Sweep: +1/-1 events of both sets; time where the depth is 2 is the intersection.
    times = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate([np.ones(len(a_s)), -np.ones(len(a_e)), np.ones(len(b_s)), -np.ones(len(b_e))])
    order = np.lexsort((delta, times))  # ends before starts at equal times
    times, delta = times[order], delta[order]
    depth = np.cumsum(delta)
    spans = np.diff(times)
    return int(spans[depth[:-1] >= 2].sum())


def clip(starts: Ints, ends: Ints, lo: int, hi: int) -> tuple[Ints, Ints]:
    """Intervals cut to [lo, hi]; empty ones dropped."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    return s[keep], e[keep]
