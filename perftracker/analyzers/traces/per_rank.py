"""Per-rank computation: a view built a few ranks at a time over their own events, its small results put together."""

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


def by_rank(store: Store, fn: ChunkFn) -> pd.DataFrame:
    """`fn` over each chunk of ranks' events, the results concatenated in rank order (docs/internals/analyzers.md)."""
    chunks = rank_chunks({rank: store.rank_rows(rank) for rank in store.event_ranks()})
    parts = [fn(ranks, store.ranks_events(ranks)) for ranks in chunks]
    if not parts:
        return fn([], store.events_schema())
    kept = [part for part in parts if len(part)] or parts[:1]
    return kept[0].reset_index(drop=True) if len(kept) == 1 else pd.concat(kept, ignore_index=True)
