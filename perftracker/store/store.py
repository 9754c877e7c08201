"""The Store: typed pandas tables, the notes the loaders left about their inputs, and what they learned about
the run (`RunInfo`). It always has every table of `schema.TABLES`; the events table is resident or on disk
(`store/event_parts.py`) and reads the same either way (docs/internals/core.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perftracker.redaction import safe_text
from perftracker.store.event_parts import EventPart, EventParts, RowMask
from perftracker.store.run_info import RunInfo
from perftracker.store.schema import TABLES, conform, empty_table


@dataclass(frozen=True)
class LoadNote:
    """Something a loader wants the user to know about an input (a lost tail, a missing rank, ...).

    `level` is info, warning or error; `source` names the file or rank.
    """

    level: str
    source: str
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # notes quote file names and lines: no credential, one line each
        object.__setattr__(self, "source", safe_text(self.source))
        object.__setattr__(self, "message", safe_text(self.message))

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "source": self.source, "message": self.message, "data": dict(self.data)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LoadNote:
        return cls(str(raw["level"]), str(raw["source"]), str(raw["message"]), dict(raw.get("data") or {}))


class Store:
    """All tables of one analysis. Analyzers read it; only loaders write it. `event_parts`: the events table on
    disk (None: resident in tables["events"])."""

    def __init__(self, tables: dict[str, pd.DataFrame] | None = None, notes: list[LoadNote] | None = None,
                 run_info: RunInfo | None = None, event_parts: EventParts | None = None) -> None:
        self.tables = {} if tables is None else tables
        self.tables.update((name, empty_table(name)) for name in TABLES if name not in self.tables)
        self.notes = [] if notes is None else notes
        self.run_info = RunInfo() if run_info is None else run_info
        self.event_parts = event_parts
        # rank -> its row ranges [lo, hi) in the events table, built on first use (see `rank_events`), and the
        # (id, rows) of the table indexed: a table put in directly (not through set_table) is indexed again
        self._rank_rows: dict[int, list[tuple[int, int]]] = {}
        self._rank_rows_of = (-1, -1)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.events if name == "events" else self.tables[name]

    @property
    def events(self) -> pd.DataFrame:
        """The whole events table. On disk (`event_parts`), every part read and concatenated on each use: the
        memory hazard at many ranks; prefer `rank_events`, `select_events` or `event_columns`."""
        if self.event_parts is not None:
            return self.event_parts.concat()
        return self.tables["events"]

    @property
    def n_events(self) -> int:
        """How many events the table holds."""
        return self.event_parts.rows if self.event_parts is not None else len(self.tables["events"])

    def events_schema(self, columns: list[str] | None = None) -> pd.DataFrame:
        """No rows, with the events table's columns (or `columns`) and dtypes (its categories)."""
        if self.event_parts is not None:
            return self.event_parts.schema(columns)
        events = self.tables["events"]
        return events.iloc[0:0] if columns is None else events[columns].iloc[0:0]

    def event_columns(self, columns: list[str]) -> pd.DataFrame:
        """`columns` of every event, in table order, with their row labels (only those columns read from disk)."""
        if self.event_parts is not None:
            return self.event_parts.concat(columns=columns)
        return self.tables["events"][columns]

    def select_events(self, mask: RowMask, columns: list[str] | None = None,
                      read_columns: list[str] | None = None) -> pd.DataFrame:
        """`events[mask(events)]` (with `columns`, default every column read) for a `mask` that tests each row on its
        own, given `read_columns` of the events (default all): on disk computed a part at a time."""
        if self.event_parts is not None:
            return self.event_parts.select(mask, columns, read_columns)
        events = self.tables["events"]
        frame = events if read_columns is None else events[read_columns]
        picked = frame.loc[np.asarray(mask(frame), dtype=bool)]
        return picked if columns is None else picked[columns]

    def close(self) -> None:
        """Remove the events' parts on disk, if any (the Store's events are then gone)."""
        if self.event_parts is not None:
            self.event_parts.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving a `with` block closes the Store (see `close`)."""
        self.close()

    @property
    def steps(self) -> pd.DataFrame:
        return self.tables["steps"]

    @property
    def ranks(self) -> pd.DataFrame:
        return self.tables["ranks"]

    def _rank_index(self) -> dict[int, list[tuple[int, int]]]:
        events = self.tables["events"]
        if self._rank_rows_of != (id(events), len(events)):
            rank = events["rank"].to_numpy()
            cuts = np.flatnonzero(rank[1:] != rank[:-1]) + 1 if len(rank) else np.empty(0, np.int64)
            rows: dict[int, list[tuple[int, int]]] = {}
            for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rank)]):
                if hi > lo:
                    rows.setdefault(int(rank[lo]), []).append((lo, hi))
            self._rank_rows, self._rank_rows_of = rows, (id(events), len(events))
        return self._rank_rows

    def _rank_parts(self, ranks: list[int]) -> list[EventPart]:
        assert self.event_parts is not None
        of_rank = self.event_parts.of_rank
        return sorted((part for rank in set(ranks) for part in of_rank.get(rank, [])), key=lambda p: p.offset)

    def event_ranks(self) -> list[int]:
        """The ranks that have events, in increasing order."""
        if self.event_parts is not None:
            return sorted(self.event_parts.of_rank)
        return sorted(self._rank_index())

    def rank_events(self, rank: int) -> pd.DataFrame:
        """The events of one rank: its rows of the events table, in table order, with their index (empty, with
        every column, for a rank without events). A slice of a rank's rows is not a copy of the table; on disk,
        only that rank's parts are read."""
        return self.ranks_events([rank])

    def rank_rows(self, rank: int) -> int:
        """How many events `rank` has."""
        if self.event_parts is not None:
            return sum(part.rows for part in self._rank_parts([rank]))
        return sum(hi - lo for lo, hi in self._rank_index().get(rank, []))

    def ranks_events(self, ranks: list[int]) -> pd.DataFrame:
        """The events of several ranks: their rows of the events table, in table order, with their index."""
        if self.event_parts is not None:
            return self.event_parts.concat(self._rank_parts(ranks))
        events, index = self.tables["events"], self._rank_index()
        spans = sorted(span for rank in ranks for span in index.get(rank, []))
        if len(spans) == 1:
            return events.iloc[spans[0][0]:spans[0][1]]
        if not spans:
            return events.iloc[0:0]
        return events.take(np.concatenate([np.arange(lo, hi) for lo, hi in spans]))

    def set_table(self, name: str, frame: pd.DataFrame) -> None:
        """Put `frame` in as table `name`; values its columns cannot hold become a note (see `conform`)."""
        problems: list[str] = []
        if name == "events" and self.event_parts is not None:
            self.event_parts.close()
            self.event_parts = None
        self.tables[name] = conform(name, frame, problems)
        if problems:
            files = sorted({str(f) for f in frame["file"].dropna().unique()[:3]}) if "file" in frame.columns else []
            self.notes.append(LoadNote("warning", f"table {name}", "; ".join(problems)
                                       + (f" (from {', '.join(files)})" if files else ""), {"problems": problems}))

    def add_notes(self, notes: Iterable[LoadNote]) -> None:
        self.notes.extend(notes)

    def host_of(self, rank: int) -> str:
        ranks = self.tables["ranks"]
        at = np.flatnonzero(ranks["rank"].to_numpy() == rank)  # not .loc[mask]: called per rank, per analyzer
        host = ranks["host"].iloc[at[0]] if len(at) else None
        return host if isinstance(host, str) else ""
