"""The one Jinja environment of every page perftracker renders: `ENV` loads `perftracker/reports/templates/`,
escapes everything it inserts and fails on an undefined name (`StrictUndefined`); `write_page` writes a page;
`run_html` is how a run or a comparison shows itself in a notebook (a small fragment: no scripts, no styles).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from perftracker._version import __version__
from perftracker.analyzers.findings import Finding
from perftracker.rundir import atomic_write_text

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perftracker.reports", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
    undefined=jinja2.StrictUndefined,
)


def write_page(path: Path, template: str, **values: Any) -> None:
    """`template` rendered with `values`, the version and the time of writing (`generated_at`), written to `path`."""
    atomic_write_text(path, ENV.get_template(template).render(
        **values, version=__version__, generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")))


def run_html(verdict: str, findings: list[Finding]) -> str:
    """Jupyter's `_repr_html_` of a run: the verdict in bold, then one row per finding in the ranked order
    (severity, title, ranks, cost per step, confidence, id)."""
    rows = [{"severity": f.severity.label, "title": f.title, "ranks": ", ".join(map(str, f.ranks[:16])),
             "cost": f"{f.cost.seconds_per_step * 1e3:.1f} ms/step" if f.cost.seconds_per_step > 0 else "",
             "confidence": "" if f.confidence is None else f"{f.confidence:.2f}", "id": f.id} for f in findings]
    return ENV.get_template("notebook_run.html.j2").render(verdict=verdict, rows=rows)
