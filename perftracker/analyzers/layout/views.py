"""The layout of an analysed run, computed once per analysis.

`parallel_layout_view(analysis)` is the run's `Layout`, inferred (`infer.infer_layout`) from the Store's group
table and the send/recv neighbours its events show, over the ranks the run's traces or step files name.
"""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.layout.infer import infer_layout
from perftracker.analyzers.layout.model import Layout
from perftracker.analyzers.layout.p2p import neighbours, p2p_ops
from perftracker.analyzers.ranks.groups import run_ranks


def parallel_layout_view(analysis: Analysis) -> Layout:
    """The run's parallel layout (an empty Layout with a note where nothing tells)."""
    store = analysis.store
    ranks = run_ranks(analysis)
    world = max(ranks) + 1 if ranks else 0
    pairs = neighbours(p2p_ops(store.events)) if not store.events.empty else set()
    return infer_layout(store.run_info.process_groups, world, pairs)
