"""index.html of `perftracker demo`: one page linking every sample run's report, with its verdict.

Promise: `render_index(path, entries)` writes a small static page (no scripts) listing each entry's
name, whether its inputs are synthetic, its verdict and a relative link to its report.html. All text
is escaped by the template.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from perftracker._version import __version__
from perftracker.reports.templating import ENV
from perftracker.rundir import atomic_write_text

_ENV = ENV  # the one environment (reports/templating.py)


@dataclass(frozen=True)
class IndexEntry:
    name: str
    verdict: str
    severity: str  # critical | warning | ok
    report: str  # relative to the index
    synthetic: bool


def render_index(path: Path, entries: list[IndexEntry], title: str) -> None:
    page = _ENV.get_template("index.html.j2").render(
        title=title, entries=entries, version=__version__,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    atomic_write_text(path, page)
