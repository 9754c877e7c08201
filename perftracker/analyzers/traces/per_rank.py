"""Per-rank computation: a view built a few ranks at a time over their own events, its small results put together.

Promise: `by_rank(store, fn)` calls `fn(ranks, events)` for consecutive groups of the ranks that have
events (in increasing rank order; a group holds whole ranks, and as many as fit in CHUNK_ROWS events, at
least one), with those ranks' rows of the events table (`Store.ranks_events`: in table order, never a copy
of the whole table), and concatenates what they return (`keep_index`: the row labels each part kept,
else a fresh 0..n-1 index). Parts without rows are left out unless all are empty, so columns and dtypes
are those of the parts; without any events it is `fn([], <no rows>)`. So a computation whose temporaries
are the size of its input (filters, sorts, joins, string tests) costs at most a chunk's worth of memory at
a time, whatever the number of ranks, while the fixed cost of each pandas call is paid once per chunk, not
once per rank; and, as long as `fn` treats each rank on its own and orders its rows by rank first, the
table is the one the all-rank computation gives. `rank_chunks(sizes)` is the grouping itself, for a view
that splits another table by rank (`sizes`: rank -> its rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd

from perftracker.store import Store

CHUNK_ROWS = 1 << 18  # events per chunk: about 20 MB of events, a few times that in a view's temporaries
ChunkFn = Callable[[list[int], pd.DataFrame], pd.DataFrame]


def rank_chunks(sizes: Mapping[int, int], chunk_rows: int | None = None) -> list[list[int]]:
    """The ranks of `sizes` in increasing order, cut into consecutive groups of at most `chunk_rows` rows
    (default CHUNK_ROWS; a rank larger than that is a group of its own)."""
    chunk_rows = CHUNK_ROWS if chunk_rows is None else chunk_rows
    chunks: list[list[int]] = []
    rows = 0
    for rank in sorted(sizes):
        if not chunks or rows + sizes[rank] > chunk_rows:
            chunks.append([])
            rows = 0
        chunks[-1].append(rank)
        rows += sizes[rank]
    return chunks


def by_rank(store: Store, fn: ChunkFn, keep_index: bool = False) -> pd.DataFrame:
    """`fn` over each chunk of ranks' events, the results concatenated in rank order (see the module docstring)."""
    chunks = rank_chunks({rank: store.rank_rows(rank) for rank in store.event_ranks()})
    parts = [fn(ranks, store.ranks_events(ranks)) for ranks in chunks]
    if not parts:
        return fn([], store.events_schema())
    kept = [part for part in parts if len(part)] or parts[:1]
    if len(kept) == 1:
        return kept[0] if keep_index else kept[0].reset_index(drop=True)
    return pd.concat(kept, ignore_index=not keep_index)
