"""Interval arithmetic on int64 nanosecond arrays: union, total length, intersection, and the length of
disjoint intervals inside given windows."""

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


def clip(starts: Ints, ends: Ints, lo: int, hi: int) -> tuple[Ints, Ints]:
    """Intervals cut to [lo, hi]; empty ones dropped."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    return s[keep], e[keep]


def clipped_total(starts: Ints, ends: Ints, lo: int, hi: int) -> int:
    """Length of the union of possibly overlapping intervals cut to [lo, hi]."""
    return total(*union(*clip(starts, ends, lo, hi)))


def intersect(a_s: Ints, a_e: Ints, b_s: Ints, b_e: Ints) -> tuple[Ints, Ints]:
    """The intersection of two sets of disjoint, sorted intervals, as disjoint, sorted intervals."""
    if len(a_s) == 0 or len(b_s) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy()
    # Each a-interval meets the b-intervals from the first ending after its start to the last starting
    # before its end; pairs are few (both sets are disjoint), so list them.
    first = np.searchsorted(b_e, a_s, side="right")
    last = np.searchsorted(b_s, a_e, side="left")
    counts = np.maximum(last - first, 0)
    a_idx = np.repeat(np.arange(len(a_s)), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    b_idx = np.repeat(first, counts) + offsets
    s = np.maximum(a_s[a_idx], b_s[b_idx])
    e = np.minimum(a_e[a_idx], b_e[b_idx])
    keep = e > s
    return s[keep].astype(np.int64), e[keep].astype(np.int64)


def covered_within(starts: Ints, ends: Ints, lo: Ints, hi: Ints) -> Ints:
    """For each window [lo[i], hi[i]), the length of disjoint, sorted intervals inside it."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    cumulative = np.concatenate([[0], np.cumsum(ends - starts)])

    def before(t: Ints) -> Ints:
        """Covered length before each time t."""
        k = np.searchsorted(ends, t, side="right")  # intervals ending at or before t are whole
        whole = cumulative[k]
        inside = (k < len(starts)) & (starts[np.minimum(k, len(starts) - 1)] < t)
        partial = np.where(inside, t - starts[np.minimum(k, len(starts) - 1)], 0)
        result: Ints = (whole + partial).astype(np.int64)
        return result

    covered: Ints = np.maximum(before(hi) - before(lo), 0)
    return covered
