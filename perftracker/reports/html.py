"""report.html: one self-contained page (plotly.js inlined, works offline), drawn from tables and findings.

`SECTIONS` is the explicit list of sections in page order; `build_sections` runs them; `render` writes the page,
everything from inputs escaped by the templates. The inlined bundle: docs/internals/core.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.utils import PlotlyJSONEncoder

from perftracker.analyzers.findings import Finding, Severity
from perftracker.reports import charts
from perftracker.reports.efficiency_section import efficiency_section
from perftracker.reports.evidence import evidence_items
from perftracker.reports.health_sections import gpu_section, rdma_section
from perftracker.reports.json_report import verdict
from perftracker.reports.kernel_section import kernels_section
from perftracker.reports.nccl_section import inspector_section, nccl_section
from perftracker.reports.sections import Section, SectionFn
from perftracker.reports.strip import StripCell
from perftracker.reports.templating import ENV, write_page
from perftracker.reports.trace_sections import (
    breakdown_section,
    layout_section,
    overlap_section,
    profile_section,
    steps_section,
    stragglers_section,
    timeline_section,
)
from perftracker.reports.waits_section import critical_path_section, wait_graph_section, waits_section
from perftracker.store import LoadNote

SECTIONS: tuple[SectionFn, ...] = (
    wait_graph_section, breakdown_section, overlap_section, kernels_section, steps_section, layout_section,
    stragglers_section, waits_section,
    critical_path_section, timeline_section, nccl_section, inspector_section, rdma_section, gpu_section, profile_section,
    efficiency_section,
)

def build_sections(tables: Mapping[str, pd.DataFrame],
                   findings: list[Finding]) -> tuple[list[Section], list[tuple[str, str]]]:
    """Every section of SECTIONS that has something to show, in order, and (section, what went wrong) for each
    section its tables could not draw: a table edited or damaged in an output folder costs its own section,
    never the report."""
    sections: list[Section] = []
    failed: list[tuple[str, str]] = []
    for fn in SECTIONS:
        try:
            section = fn(tables, findings)
        except Exception as exc:  # noqa: BLE001 - tables are data read from disk: any shape can arrive
            failed.append((fn.__name__.removesuffix("_section"), f"{type(exc).__name__}: {exc}"[:300]))
            continue
        if section is not None:
            sections.append(section)
    return sections, failed


def _section_view(section: Section, figure_ids: list[str]) -> dict[str, Any]:
    return {"key": section.key, "title": section.title, "template": section.template, "data": section.data,
            "figure_ids": figure_ids}


MAX_NOTES = 100  # notes on the page (a run of thousands of ranks can have one per file); all are in findings.json
PLOTLY_ASSET = "plotly-cartesian.min.js.gz"
PLOTLY_TRACE_TYPES = frozenset({"bar", "box", "contour", "heatmap", "histogram", "histogram2d",
                                "histogram2dcontour", "image", "pie", "scatter", "scatterternary", "violin"})


@cache
def plotly_bundle_b64() -> str:
    """The gzip-compressed cartesian plotly.js bundle, base64-encoded for inlining."""
    data = resources.files("perftracker.reports").joinpath("assets", PLOTLY_ASSET).read_bytes()
    return base64.b64encode(data).decode("ascii")


def render_section(section: Section) -> str:
    """The markup of one section's template alone (its figures left out)."""
    return ENV.get_template(section.template).render(s=_section_view(section, []))


def render(path: Path, findings: list[Finding], notes: list[LoadNote], sections: list[Section],
           title: str, coverage: dict[str, Any] | None = None,
           synthetic: list[dict[str, Any]] | None = None, strip: list[StripCell] | None = None,
           timeline_command: str = "", timeline_file: str = "") -> None:
    """Write the page. `synthetic` is the summary's `synthetic_inputs` (shown as a banner under the header);
    `strip` the summary strip's cells (`reports.strip`), shown with the verdict before the findings;
    `timeline_command` the `perftracker timeline` command line that writes this run's merged timeline;
    `timeline_file` the name of that timeline when it is already written beside the page (then linked)."""
    figures: dict[str, Any] = {}
    view_sections = []
    for section in sections:
        ids = []
        for i, fig in enumerate(section.figures):
            fig_id = f"fig-{section.key}-{i}"
            figures[fig_id] = charts.safe_figure(fig)  # no plotly markup from data, whatever a chart forgot
            ids.append(fig_id)
        view_sections.append(_section_view(section, ids))
    top = max((f.severity for f in findings), default=Severity.INFO)
    verdict_class = "ok" if top == Severity.INFO else top.label
    figures_json = json.dumps(figures, cls=PlotlyJSONEncoder).replace("<", "\\u003c")
    write_page(
        path, "report.html.j2", title=title, verdict=verdict(findings, coverage), verdict_class=verdict_class,
        not_judged=(coverage or {}).get("not_judged") or [], synthetic=synthetic or [],
        findings=[_finding_view(f) for f in findings], sections=view_sections, strip=strip or [],
        timeline_command=timeline_command, timeline_file=timeline_file,
        notes=[n.to_dict() for n in notes[:MAX_NOTES]], notes_more=max(0, len(notes) - MAX_NOTES),
        figures_json=figures_json, plotly_gz_b64=plotly_bundle_b64())


def _first(items: list[Any], limit: int = 16) -> str:
    """The first `limit` items joined, with how many more (a finding of 4,096 ranks names 16 of them)."""
    return ", ".join(str(i) for i in items[:limit]) + (f" (+{len(items) - limit:,} more)" if len(items) > limit else "")


def _finding_view(f: Finding) -> dict[str, Any]:
    data = f.to_dict()
    ranks = list(f.ranks)
    data["ranks_text"] = _first(ranks)
    data["hosts_text"] = _first(list(f.hosts))
    data["evidence_items"] = evidence_items(f.evidence)  # findings.json keeps the exact values
    return data
