"""A Store's events kept on disk, one Parquet file per trace (a rank window), read a part at a time.

Promise: `EventParts` holds the events table as the parts the reduce step wrote in table order (each part
one trace's rows, already in the schema's dtypes, `add`), with the table's category dtypes (`finish`:
per column, the parts' dtype when all parts agree, else the sorted union of their categories, as
`pd.concat` of the parts would make them) and each part's place in the table (its first row). Every
read (`read`, `read_rows`, `concat`, `select`) gives rows exactly as the all-rank table would hold them:
the same values, dtypes (categories recoded to the table's) and row labels (the table's 0..n-1), so a
computation over parts gives what it gave over the resident table. Only `columns` are read when asked.
The folder is this object's own (made under the system's temporary folder and removed by `close`, or at
the latest when the object is collected or the interpreter exits, also after a failed analysis).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow.parquet as pq  # type: ignore[import-untyped]

RowMask = Callable[[pd.DataFrame], "npt.NDArray[np.bool_] | pd.Series"]


@dataclass(frozen=True)
class EventPart:
    """One trace's rows of the events table: its file, rank, first row in the table and row count."""

    path: Path
    rank: int
    offset: int
    rows: int


class EventParts:
    """The events table of a Store as Parquet parts on disk (see the module docstring)."""

    def __init__(self, prefix: str = "perftracker-events-") -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.parts: list[EventPart] = []
        self.columns: list[str] = []
        self._dtypes: dict[str, pd.CategoricalDtype] = {}
        self._part_dtypes: dict[str, list[pd.CategoricalDtype]] = {}
        self._rows = 0
        self.of_rank: dict[int, list[EventPart]] = {}  # rank -> its parts with rows, in table order
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    @property
    def rows(self) -> int:
        return self._rows

    def add(self, frame: pd.DataFrame, rank: int) -> None:
        """Write one trace's rows (in the schema's dtypes; its index is ignored) as the next part of the table."""
        if not self.columns:
            self.columns = list(frame.columns)
        for column in self.columns:
            dtype = frame[column].dtype
            if isinstance(dtype, pd.CategoricalDtype):
                self._part_dtypes.setdefault(column, []).append(dtype)
        path = self.folder / f"part-{len(self.parts):06d}.parquet"
        frame.to_parquet(path, index=False)
        self.parts.append(EventPart(path, rank, self._rows, len(frame)))
        if len(frame):
            self.of_rank.setdefault(rank, []).append(self.parts[-1])
        self._rows += len(frame)

    def finish(self) -> None:
        """The table's category dtypes, from the parts' (call once, after the last `add`)."""
        for column, dtypes in self._part_dtypes.items():
            if all(d == dtypes[0] for d in dtypes):
                self._dtypes[column] = dtypes[0]
            else:
                values: set[str] = set()
                for dtype in dtypes:
                    values.update(dtype.categories)
                self._dtypes[column] = pd.CategoricalDtype(pd.Index(sorted(values), dtype="str"))
        self._part_dtypes = {}

    def read(self, part: EventPart, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """One part's rows as the table holds them (its row labels, the table's dtypes)."""
        wanted = list(columns) if columns is not None else self.columns
        frame: pd.DataFrame = pq.read_table(part.path, columns=wanted).to_pandas()
        frame.index = pd.RangeIndex(part.offset, part.offset + part.rows)
        for column in wanted:
            dtype = self._dtypes.get(column)
            if dtype is None or frame[column].dtype == dtype:
                continue
            if isinstance(frame[column].dtype, pd.CategoricalDtype):
                frame[column] = frame[column].cat.set_categories(dtype.categories)  # recoded by value
            else:
                frame[column] = frame[column].astype(dtype)
        return frame[wanted]

    def schema(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """No rows, the table's columns and dtypes."""
        wanted = list(columns) if columns is not None else self.columns
        if not self.parts:
            return pd.DataFrame(columns=wanted)
        return self.read(self.parts[0], wanted).iloc[0:0]

    def iter_parts(self, parts: Sequence[EventPart] | None = None,
                   columns: Sequence[str] | None = None) -> Iterator[pd.DataFrame]:
        """The rows of `parts` (default: all), a part at a time, in table order."""
        for part in sorted(self.parts if parts is None else parts, key=lambda p: p.offset):
            yield self.read(part, columns)

    def concat(self, parts: Sequence[EventPart] | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows of `parts` (default: all: the whole table, the memory hazard) in table order, as one frame."""
        frames = list(self.iter_parts(parts, columns))
        if not frames:
            return self.schema(columns)
        return frames[0] if len(frames) == 1 else pd.concat(frames)

    def select(self, mask: RowMask, columns: Sequence[str] | None = None,
               read_columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows for which `mask` (a test of each row on its own, given one part's `read_columns`, default all)
        holds, with `columns` (default: those read), in table order: what `table[mask(table)]` gives."""
        picked = []
        for frame in self.iter_parts(columns=read_columns):
            keep = np.asarray(mask(frame), dtype=bool)
            if keep.any():
                chosen = frame.loc[keep]
                picked.append(chosen if columns is None else chosen[list(columns)])
        if not picked:
            empty = self.schema(read_columns)
            return empty if columns is None else empty[list(columns)]
        return picked[0] if len(picked) == 1 else pd.concat(picked)

    def close(self) -> None:
        """Remove the folder (and every part in it)."""
        self._cleanup()
