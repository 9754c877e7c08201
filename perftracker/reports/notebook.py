"""How a run or a comparison shows itself in a notebook (Jupyter's `_repr_html_`): the verdict, then the
findings as a table (severity, title, ranks, cost per step, confidence, id).

Promise: `run_html(verdict, findings)` returns a small HTML fragment (no scripts, no styles that leak into
the notebook), every text escaped by the template.
"""

from __future__ import annotations

from perftracker.analyzers.findings import Finding
from perftracker.reports.templating import ENV


def run_html(verdict: str, findings: list[Finding]) -> str:
    """The fragment: the verdict in bold, then one row per finding in the ranked order."""
    rows = [{"severity": f.severity.label, "title": f.title, "ranks": ", ".join(map(str, f.ranks[:16])),
             "cost": f"{f.cost.seconds_per_step * 1e3:.1f} ms/step" if f.cost.seconds_per_step > 0 else "",
             "confidence": "" if f.confidence is None else f"{f.confidence:.2f}", "id": f.id} for f in findings]
    return ENV.get_template("notebook_run.html.j2").render(verdict=verdict, rows=rows)
