"""The report's wait-for section: who waits for whom in a hung or failed job, grouped by process group.

Promise: `wait_graph_section(tables, findings)` lays out the `wait_graph` view (analyzers/failures/
waitview.py) as one table a person can follow from any waiting rank to the root it leads to: per
process-group kind and group, the stuck collective, the ranks waiting in it, the ranks they wait for
(and which left no dump), since when, from which source; the note above it names each root (the root
findings' titles). None when the job did not hang.
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
