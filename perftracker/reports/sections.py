"""Report sections: the unit the HTML report is assembled from.

A section builder is a plain function `(Store, list[Finding]) -> ReportSection | None` (None when
the section has nothing to show). `html` must already be safe: every piece of trace or log content
in it escaped with `html.escape`. `figures` are plotly figures as dicts (`fig.to_plotly_json()`),
rendered by the page with the inlined plotly.js.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perftracker.analyzers.findings import Finding
from perftracker.store import Store


@dataclass(frozen=True)
class ReportSection:
    key: str  # short identifier, used as the HTML anchor
    title: str
    html: str = ""  # safe HTML shown above the figures
    figures: list[dict[str, Any]] = field(default_factory=list)


SectionBuilder = Callable[[Store, list[Finding]], "ReportSection | None"]
