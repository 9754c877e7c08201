"""Per-rank computation: a view built rank by rank over each rank's own events, its small results put together.

Promise: `by_rank(store, fn)` calls `fn(rank, events)` for each rank that has events, in increasing rank
order, with that rank's rows of the events table (`Store.rank_events`: a slice, never a copy of the whole
table), and concatenates what they return (`keep_index`: the row labels each part kept, else a fresh
0..n-1 index). Parts without rows are left out unless all are empty, so columns and dtypes are those of
the parts; without any events it is `fn(-1, <no rows>)`. So a computation whose temporaries are the size
of its input (filters, sorts, joins, string tests) costs one rank's worth of memory at a time, and, as
long as `fn` treats each rank on its own and the all-rank version orders rows by rank first, gives the
table the all-rank computation gives.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from perftracker.store import Store

RankFn = Callable[[int, pd.DataFrame], pd.DataFrame]


def by_rank(store: Store, fn: RankFn, keep_index: bool = False) -> pd.DataFrame:
    """`fn` over each rank's events, the results concatenated in rank order (see the module docstring)."""
    parts = [fn(rank, store.rank_events(rank)) for rank in store.event_ranks()]
    if not parts:
        return fn(-1, store.events.iloc[0:0])
    kept = [part for part in parts if len(part)] or parts[:1]
    if len(kept) == 1:
        return kept[0] if keep_index else kept[0].reset_index(drop=True)
    return pd.concat(kept, ignore_index=not keep_index)
