"""report.html: one self-contained page (plotly.js inlined, works offline).

Everything that came from a trace or log is escaped by the template (autoescape); figure JSON is
embedded as data, with `<` escaped so it cannot close the script element.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from plotly.offline import get_plotlyjs
from plotly.utils import PlotlyJSONEncoder

from perftracker import __version__
from perftracker.analyzers.findings import Finding, Severity
from perftracker.reports import charts
from perftracker.reports.json_report import verdict
from perftracker.reports.sections import ReportSection
from perftracker.rundir import atomic_write_text
from perftracker.store import LoadNote

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perftracker.reports", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
)


def _table_html(frame: pd.DataFrame, columns: dict[str, str], limit: int = 64) -> str:
    """A small HTML table; values are escaped."""
    import html

    if frame.empty:
        return ""
    head = "".join(f"<th>{html.escape(label)}</th>" for label in columns.values())
    body = []
    for _, row in frame.head(limit).iterrows():
        cells = []
        for col in columns:
            value = row[col]
            text = f"{value:.2f}" if isinstance(value, float) else str(value)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>{len(frame) - limit} more rows in tables/.</p>" if len(frame) > limit else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def core_sections(tables: dict[str, pd.DataFrame], findings: list[Finding]) -> list[ReportSection]:
    bd, stats = tables.get("breakdown", pd.DataFrame()), tables.get("step_stats", pd.DataFrame())
    sections = []
    figs = [f for f in (charts.breakdown_chart(bd),) if f]
    if figs:
        cols = {"rank": "rank", "window": "window", "compute_pct": "compute %", "comm_exposed_pct": "exposed comm %",
                "memory_exposed_pct": "exposed memory %", "idle_pct": "idle %", "overlap_pct": "comm overlapped %",
                "steps": "steps"}
        sections.append(ReportSection("breakdown", "GPU time breakdown", _table_html(bd, cols), figs))
    figs = [f for f in (charts.overlap_chart(bd),) if f]
    if figs:
        sections.append(ReportSection("overlap", "Communication / compute overlap", "", figs))
    changes = [int(f.evidence["change_step"]) for f in findings if "change_step" in f.evidence]
    figs = [f for f in (charts.step_time_chart(stats),
                        charts.step_series_chart(tables.get("steps", pd.DataFrame()), change_steps=changes)) if f]
    if figs:
        cols = {"rank": "rank", "steps": "steps", "median_s": "median s", "p90_s": "p90 s", "max_s": "max s"}
        sections.append(ReportSection("steps", "Step time", _table_html(stats, cols), figs))
    figs = [f for f in (charts.lateness_heatmap(tables.get("lateness", pd.DataFrame())),
                        charts.wait_bars(tables.get("rank_waits", pd.DataFrame()))) if f]
    if figs:
        sections.append(ReportSection("stragglers", "Stragglers at collectives", "", figs))
    figs = [f for f in (charts.timeline_chart(tables.get("timeline", pd.DataFrame())),) if f]
    if figs:
        sections.append(ReportSection("timeline", "Timeline of a representative step", "", figs))
    return sections


def render(path: Path, findings: list[Finding], notes: list[LoadNote], sections: list[ReportSection],
           title: str, coverage: dict[str, Any] | None = None) -> None:
    figures: dict[str, Any] = {}
    view_sections = []
    for section in sections:
        ids = []
        for i, fig in enumerate(section.figures):
            fig_id = f"fig-{section.key}-{i}"
            figures[fig_id] = fig
            ids.append(fig_id)
        view_sections.append({"key": section.key, "title": section.title, "html": section.html, "figure_ids": ids})
    top = max((f.severity for f in findings), default=Severity.INFO)
    verdict_class = "ok" if top == Severity.INFO else top.label
    figures_json = json.dumps(figures, cls=PlotlyJSONEncoder).replace("<", "\\u003c")
    page = _ENV.get_template("report.html.j2").render(
        title=title, generated_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), version=__version__,
        verdict=verdict(findings, coverage), verdict_class=verdict_class,
        not_judged=(coverage or {}).get("not_judged") or [],
        findings=[_finding_view(f) for f in findings], sections=view_sections,
        notes=[n.to_dict() for n in notes], figures_json=figures_json, plotly_js=get_plotlyjs(),
    )
    atomic_write_text(path, page)


def _finding_view(f: Finding) -> dict[str, Any]:
    data = f.to_dict()
    ranks = list(f.ranks)
    data["ranks_text"] = ", ".join(str(r) for r in ranks[:16]) + (f" (+{len(ranks) - 16} more)" if len(ranks) > 16 else "")
    data["evidence_text"] = json.dumps(data["evidence"], indent=1, default=str)[:20000]
    return data
