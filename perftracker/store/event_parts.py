"""A Store's events kept on disk, in one Parquet file of one row group per trace (a rank window), read on demand.

Every read gives rows exactly as the all-rank table would hold them (values, dtypes, row labels); the file lives
in a folder of its own, removed by `close` or at exit. Details: docs/internals/core.md.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

RowMask = Callable[[pd.DataFrame], "npt.NDArray[np.bool_] | pd.Series"]
SELECT_ROWS = 1 << 16  # rows read at a time by `select` (whole parts): a few MB of temporaries


@dataclass(frozen=True)
class EventPart:
    """One trace's rows of the events table: its row group, rank, first row in the table and row count."""

    group: int
    rank: int
    offset: int
    rows: int
    # per category column, the categories its codes in the file refer to (dropped by `finish`)
    categories: dict[str, pd.CategoricalDtype] = field(default_factory=dict, compare=False, repr=False)


class EventParts:
    """The events table of a Store as Parquet row groups on disk (see the module docstring)."""

    def __init__(self, prefix: str = "perftracker-events-") -> None:
        # pyarrow's default pool (mimalloc) keeps what it freed: every read's buffers would stay in the RSS. The
        # system allocator gives them back (this process's pyarrow allocations all go there from now on).
        pa.set_memory_pool(pa.system_memory_pool())
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.path = self.folder / "events.parquet"
        self.parts: list[EventPart] = []
        self.columns: list[str] = []
        self.of_rank: dict[int, list[EventPart]] = {}  # rank -> its parts with rows, in table order
        self._dtypes: dict[str, object] = {}
        self._codes: dict[str, list[npt.NDArray[np.int32]]] = {}  # column -> per part, its codes' table codes
        self._rows = 0
        self._groups = 0
        self._place: dict[int, int] = {}  # first row -> place in `parts`, of the parts with rows
        self._writer: pq.ParquetWriter | None = None
        self._file: pq.ParquetFile | None = None
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    @property
    def rows(self) -> int:
        return self._rows

    def add(self, frame: pd.DataFrame, rank: int) -> None:
        """Append one trace's rows (in the schema's dtypes; its index is ignored) as the next part of the table."""
        if not self.columns:
            self.columns = list(frame.columns)
            self._dtypes = {c: frame[c].dtype for c in self.columns}
        arrays, categories = {}, {}
        for column in self.columns:
            values = frame[column]
            if isinstance(values.dtype, pd.CategoricalDtype):
                categories[column] = values.dtype
                arrays[column] = pa.array(values.cat.codes.to_numpy().astype(np.int32))
            else:
                arrays[column] = pa.array(values.to_numpy())
        group = -1
        if len(frame):  # a part without rows has no row group
            table = pa.table(arrays)
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.path, table.schema, compression="none")
            self._writer.write_table(table, row_group_size=len(frame))
            group, self._groups = self._groups, self._groups + 1
        part = EventPart(group, rank, self._rows, len(frame), categories)
        self._place[part.offset] = len(self.parts)  # a part with rows is the only one at its offset
        self.parts.append(part)
        if len(frame):
            self.of_rank.setdefault(rank, []).append(part)
        self._rows += len(frame)

    def finish(self) -> None:
        """Close the file; the table's category dtypes and each part's code map (once, after the last `add`)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._file = pq.ParquetFile(self.path)
        for column in [c for c in self.columns if isinstance(self._dtypes[c], pd.CategoricalDtype)]:
            dtypes = [part.categories[column] for part in self.parts]
            table_dtype = dtypes[0] if all(d == dtypes[0] for d in dtypes) else pd.CategoricalDtype(
                pd.Index(sorted(set[str]().union(*(d.categories for d in dtypes))), dtype="str"))
            self._dtypes[column] = table_dtype
            self._codes[column] = [  # per part (by its place in `parts`); code -1 (NaN) maps through the last entry
                np.concatenate([table_dtype.categories.get_indexer(d.categories), [-1]]).astype(np.int32)
                for d in dtypes]
        for part in self.parts:
            part.categories.clear()

    def _frame(self, parts: Sequence[EventPart], columns: list[str]) -> pd.DataFrame:
        """`columns` of `parts` (in table order, non-empty), read in one call."""
        assert self._file is not None
        groups = [part.group for part in parts]
        table = self._file.read_row_groups(groups, columns=columns, use_threads=False)
        data: dict[str, object] = {}
        places = [self._place[part.offset] for part in parts]
        bounds = np.cumsum([0, *(part.rows for part in parts)])
        for column in columns:
            chunked = table.column(column)
            table = table.drop_columns([column])  # each column's Arrow buffers go once copied out: one copy at a time
            chunks = [chunk.to_numpy() for chunk in chunked.chunks]
            del chunked
            # a copy (writable, not Arrow's memory) where the mapping below does not make one
            flat = np.concatenate(chunks) if len(chunks) != 1 else chunks[0] if column in self._codes else chunks[0].copy()
            del chunks
            if column in self._codes:
                maps = self._codes[column]
                codes = np.concatenate([maps[place][flat[lo:hi]] for place, lo, hi in zip(places, bounds[:-1], bounds[1:])])
                dtype = self._dtypes[column]
                assert isinstance(dtype, pd.CategoricalDtype)
                data[column] = pd.Categorical.from_codes(codes, dtype=dtype)
            else:
                data[column] = flat
        index: pd.Index = pd.RangeIndex(parts[0].offset, parts[0].offset + parts[0].rows) if len(parts) == 1 else \
            pd.Index(np.concatenate([np.arange(p.offset, p.offset + p.rows) for p in parts]))
        return pd.DataFrame(data, index=index, columns=columns, copy=False)  # the arrays above are its own

    def schema(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """No rows, the table's columns and dtypes."""
        wanted = list(columns) if columns is not None else self.columns
        return pd.DataFrame({c: pd.Series([], dtype=self._dtypes[c]) for c in wanted}, columns=wanted)  # type: ignore[call-overload]

    def concat(self, parts: Sequence[EventPart] | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows of `parts` (default: all: the whole table, the memory hazard) in table order, as one frame."""
        wanted = list(columns) if columns is not None else self.columns
        chosen = sorted((p for p in (self.parts if parts is None else parts) if p.rows), key=lambda p: p.offset)
        if not chosen:
            return self.schema(wanted)
        if parts is None and len(chosen) == len(self.parts):
            return self._frame(chosen, wanted).set_axis(pd.RangeIndex(0, self._rows))
        return self._frame(chosen, wanted)

    def select(self, mask: RowMask, columns: Sequence[str] | None = None,
               read_columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows for which `mask` (a test of each row on its own, given `read_columns`, default all) holds,
        with `columns` (default: those read), in table order: what `table[mask(table)]` gives; read SELECT_ROWS
        rows (whole parts) at a time."""
        wanted = list(read_columns) if read_columns is not None else self.columns
        picked = []
        batches: list[list[EventPart]] = [[]]
        rows = 0
        for part in (p for p in self.parts if p.rows):
            if batches[-1] and rows + part.rows > SELECT_ROWS:
                batches.append([])
                rows = 0
            batches[-1].append(part)
            rows += part.rows
        for parts in filter(None, batches):
            frame = self._frame(parts, wanted)
            keep = np.asarray(mask(frame), dtype=bool)
            if keep.any():
                chosen = frame.loc[keep]
                picked.append(chosen if columns is None else chosen[list(columns)])
        if not picked:
            empty = self.schema(wanted)
            return empty if columns is None else empty[list(columns)]
        return picked[0] if len(picked) == 1 else pd.concat(picked)

    def close(self) -> None:
        """Remove the folder (and the file in it)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._file = None
        self._cleanup()
