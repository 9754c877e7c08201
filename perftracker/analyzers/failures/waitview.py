"""The wait-for graph of a hung or failed job, computed once per analysis, and its table for the report.

`graph_of(analysis)` is the `waitfor.WaitGraph` of the Store (through `analysis.view`, so the `crash` analyzer
and the report share one computation).
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.waitfor import WaitGraph, wait_graph
from perftracker.analyzers.failures.waitsources import world_size

COLUMNS = ("group", "pg", "collective", "waiting", "waits_for", "no_dump", "since", "source", "root")
MAX_ROWS = 4096
_LISTED = 32


def graph_of(analysis: Analysis) -> WaitGraph:
    return wait_graph(analysis.store, world_size(analysis.store))


def _ranks(ranks: tuple[int, ...]) -> str:
    shown = ", ".join(str(r) for r in ranks[:_LISTED])
    return shown + (f" (+{len(ranks) - _LISTED})" if len(ranks) > _LISTED else "")


def wait_graph_view(analysis: Analysis) -> pd.DataFrame:
    graph = analysis.view(graph_of)
    if not graph.blocked:
        return pd.DataFrame(columns=list(COLUMNS))
    leads: dict[int, str] = {}
    for root in graph.roots:
        for rank in (*root.ranks, *root.behind):
            leads.setdefault(rank, _ranks(root.ranks))
    rows = []
    for b in sorted(graph.blocked, key=lambda b: (b.source != "flight recorder", b.desc, len(b.pg), b.pg, b.seq)):
        what = f"{b.op} #{b.seq}" if b.seq >= 0 else b.op
        since = pd.Timestamp(b.since_ns, unit="ns", tz="UTC").strftime("%H:%M:%S.%f")[:-3] if b.since_ns > 0 else ""
        leads_to = next((leads[r] for r in b.entered if r in leads), "")
        rows.append({"group": b.desc or (f"pg {b.pg}" if b.pg else b.source), "pg": b.pg, "collective": what,
                     "waiting": _ranks(b.entered), "waits_for": _ranks(b.absent) if b.absent else "nobody (all entered)",
                     "no_dump": _ranks(b.no_dump), "since": since, "source": b.source, "root": leads_to})
    return pd.DataFrame(rows[:MAX_ROWS], columns=list(COLUMNS))
