"""Group-by on integer codes with numpy: the statistics the kernel and op tables need, without pandas' string hashing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


def codes_of(values: pd.Series) -> tuple[Ints, list[object]]:
    """(code of each row, the distinct values); a missing value (categorical code -1) is the last value, ""."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(np.int64), [*values.cat.categories.tolist()]
    else:
        found, distinct = pd.factorize(values)
        codes, uniques = found.astype(np.int64), list(distinct)
    return np.where(codes < 0, len(uniques), codes), [*uniques, ""]


def per_value(values: pd.Series, test: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    """`test` of each row's value as text, run once per distinct value."""
    codes, distinct = codes_of(values)
    answers = np.array([bool(test(str(v))) for v in distinct], dtype=bool)
    result: npt.NDArray[np.bool_] = answers[codes]
    return result


def value_test(column: pd.Series, test: Callable[[str], bool]) -> Callable[[pd.Series], npt.NDArray[np.bool_]]:
    """`per_value(part, test)` for parts of `column` (row slices: one rank's rows), with `test` run once per
    distinct value of the whole column when it is categorical, not once per part."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return lambda part: per_value(part, test)
    dtype = column.dtype
    answers = np.array([bool(test(str(v))) for v in [*dtype.categories.tolist(), ""]], dtype=bool)

    def of(part: pd.Series) -> npt.NDArray[np.bool_]:
        if part.dtype != dtype:
            return per_value(part, test)
        result: npt.NDArray[np.bool_] = answers[codes_of(part)[0]]
        return result

    return of


@dataclass(frozen=True)
class Groups:
    """Rows grouped by integer keys: `ids` is the group of each row, `first` one row of each group."""

    ids: Ints
    first: Ints

    @classmethod
    def of(cls, *keys: Ints) -> Groups:
        """Groups of equal key tuples (integer arrays of one length), in the order of the keys."""
        keys = tuple(k - k.min() if len(k) else k for k in (np.asarray(k, dtype=np.int64) for k in keys))
        combined = np.zeros(len(keys[0]), dtype=np.int64)
        radix = 1
        for key in keys:
            size = int(key.max()) + 1 if len(key) else 1
            if radix * size >= 2**62:  # too wide to pack into one int64: group the rows instead
                rows = np.stack(keys, axis=1)
                _, first, ids = np.unique(rows, axis=0, return_index=True, return_inverse=True)
                return cls(ids.reshape(-1).astype(np.int64), first.astype(np.int64))
            combined = combined * size + key
            radix *= size
        _, first, ids = np.unique(combined, return_index=True, return_inverse=True)
        return cls(ids.reshape(-1).astype(np.int64), first.astype(np.int64))

    @property
    def n(self) -> int:
        return len(self.first)

    def count(self, mask: npt.NDArray[np.bool_] | None = None) -> Ints:
        weights = None if mask is None else mask.astype(np.float64)
        return np.bincount(self.ids, weights=weights, minlength=self.n).astype(np.int64)

    def sum(self, values: Ints, mask: npt.NDArray[np.bool_] | None = None) -> Ints:
        weights = values.astype(np.float64) if mask is None else np.where(mask, values, 0).astype(np.float64)
        return np.rint(np.bincount(self.ids, weights=weights, minlength=self.n)).astype(np.int64)

    def quantile(self, values: Ints, q: float) -> Floats:
        """The q-quantile of `values` in each group, interpolated linearly between order statistics."""
        if self.n == 0:
            return np.empty(0, dtype=np.float64)
        order = np.lexsort((values, self.ids))
        ordered = values[order].astype(np.float64)
        counts = np.bincount(self.ids, minlength=self.n)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        position = starts + q * (counts - 1)
        lo = np.floor(position).astype(np.int64)
        hi = np.ceil(position).astype(np.int64)
        result: Floats = ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)
        return result

    def pairs(self, key: Ints) -> tuple[Ints, Ints]:
        """The distinct (group, value of `key`) pairs, as two arrays: e.g. the ranks each kernel ran on."""
        low = int(key.min()) if len(key) else 0
        size = int(key.max()) - low + 1 if len(key) else 1
        pairs = np.unique(self.ids * size + (key - low))
        return pairs // size, pairs % size + low
