"""The report's wait-for section: who waits for whom in a hung or failed job, grouped by process group.

`wait_graph_section(tables, findings)` lays out the `wait_graph` view, with each root named above it. None when
the job did not hang.
"""

from __future__ import annotations

from perftracker.analyzers.findings import Finding, Mark
from perftracker.reports.sections import Section, Tables, grid, table

_COLUMNS = {"group": "process group", "pg": "pg", "collective": "collective (#seq)", "waiting": "waiting ranks",
            "waits_for": "wait for", "no_dump": "left no dump", "since": "since (UTC)", "source": "source",
            "root": "leads to root"}


def wait_graph_section(tables: Tables, findings: list[Finding]) -> Section | None:
    view = table(tables, "wait_graph")
    if view.empty:
        return None
    roots = [f.title for f in findings if Mark.WAIT_ROOT.on(f)]
    note = ("Read from any waiting rank: it waits in the collective of its row for the ranks in 'wait for'; "
            "follow those to the root. " + " ".join(f"Root: {t}." for t in roots[:4]))
    return Section("waitfor", "Who waits for whom", "section_table.html.j2",
                   {"note": note, "table": grid(view, _COLUMNS, limit=64, source="wait_graph")})
