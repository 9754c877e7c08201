"""index.html of `perftracker demo`: one page linking every sample run's report, with its verdict.

Promise: `render_index(path, entries)` writes a small static page (no scripts) listing each entry's
name, whether its inputs are synthetic, its verdict and a relative link to its report.html. All text
is escaped by the template.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perftracker.reports.templating import write_page


@dataclass(frozen=True)
class IndexEntry:
    name: str
    verdict: str
    severity: str  # critical | warning | ok
    report: str  # relative to the index
    synthetic: bool


def render_index(path: Path, entries: list[IndexEntry], title: str) -> None:
    write_page(path, "index.html.j2", title=title, entries=entries)
