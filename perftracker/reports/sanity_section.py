"""The report section of `perftracker sanity`: every device's figures in one table, the slow ones first
(the first `MAX_ROWS`), and a note with the cluster's collective figures. Rendering only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perftracker.reports.sections import Section, cell

MAX_ROWS = 64
_FIXED = ("host", "rank", "device", "status")


def sanity_section(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str], note: str) -> Section:
    """See the module docstring; `labels` maps a figure's key to its column title."""
    figures = [k for k in labels if any(k in row for row in rows)]
    head = [*_FIXED, *(labels[k] for k in figures)]
    shown = [[cell(row.get(k, "")) for k in (*_FIXED, *figures)] for row in rows[:MAX_ROWS]]
    table = {"head": head, "rows": shown, "more": max(0, len(rows) - MAX_ROWS), "source": "sanity_devices"}
    return Section(key="sanity", title="Every node's figures (slowest first)", template="section_table.html.j2",
                   data={"note": note, "table": table})
