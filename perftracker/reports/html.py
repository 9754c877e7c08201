"""report.html: one self-contained page (plotly.js inlined, works offline), drawn from tables and findings; and
diff.html (`render_diff`), the page of `perftracker diff`: the verdict, its findings, the ops and ranks that changed.

`SECTIONS` is the explicit list of sections in page order; `build_sections` runs them; `summary_strip` lays out the
strip at the top (the `run_summary` view and the biggest cost; a value not measured is left out, never shown as
0); `render` writes the page, everything from inputs escaped by the templates. The bundle: docs/internals/core.md.
"""


from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.utils import PlotlyJSONEncoder

from perftracker.analyzers.findings import Finding, Severity
from perftracker.reports import charts
from perftracker.reports.efficiency_section import efficiency_section
from perftracker.reports.evidence import evidence_items, number
from perftracker.reports.health_sections import gpu_section, inspector_section, nccl_section, rdma_section
from perftracker.reports.json_report import biggest_cost, verdict
from perftracker.reports.sections import Section, SectionFn, Tables, table
from perftracker.reports.templating import ENV, write_page
from perftracker.reports.trace_sections import (
    breakdown_section,
    kernels_section,
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
    `strip` the summary strip's cells (`summary_strip`), shown with the verdict before the findings;
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
        findings=[{**f.to_dict(), "ranks_text": _first(list(f.ranks)), "hosts_text": _first(list(f.hosts)),
                   "evidence_items": evidence_items(f.evidence, f.analyzer)} for f in findings],  # findings.json: exact
        sections=view_sections, strip=strip or [],
        timeline_command=timeline_command, timeline_file=timeline_file,
        notes=[n.to_dict() for n in notes[:MAX_NOTES]], notes_more=max(0, len(notes) - MAX_NOTES),
        figures_json=figures_json, plotly_gz_b64=plotly_bundle_b64())


def _first(items: list[Any], limit: int = 16) -> str:
    """The first `limit` items joined, with how many more (a finding of 4,096 ranks names 16 of them)."""
    return ", ".join(str(i) for i in items[:limit]) + (f" (+{len(items) - limit:,} more)" if len(items) > limit else "")


MAX_DIFF_ROWS = 60


def _op_rows(ops: pd.DataFrame) -> list[dict[str, Any]]:
    if ops.empty:
        return []
    moved = ops[ops["change"] != "same"].head(MAX_DIFF_ROWS)
    top = max(float(moved[["base_ms", "new_ms"]].max().max()) if not moved.empty else 0.0, 1e-9)
    return [{"rank": "all" if int(r["rank"]) < 0 else str(int(r["rank"])), "kind": str(r["kind"]),
             "name": str(r["name"]), "short": str(r["name"])[:90], "change": str(r["change"]),
             "base": f"{float(r['base_ms']):.2f}", "new": f"{float(r['new_ms']):.2f}",
             "extra": f"{float(r['delta_ms']):+.2f}",
             "base_pct": round(100 * float(r["base_ms"]) / top, 1), "new_pct": round(100 * float(r["new_ms"]) / top, 1)}
            for _, r in moved.iterrows()]


def _rank_rows(ranks: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"rank": int(r["rank"]), "op": str(r["op"]), "base": f"{float(r['base_ms']):.2f}",
             "new": f"{float(r['new_ms']):.2f}", "excess": f"{float(r['excess_ms']):+.2f}", "named": bool(r["named"])}
            for _, r in ranks.iterrows()] if not ranks.empty else []


def render_diff(path: Path, findings: list[Finding], ops: pd.DataFrame, ranks: pd.DataFrame,
                summary: Mapping[str, Any], title: str, verdict: str, side_reports: Mapping[str, str] | None = None) -> None:
    """Write diff.html, the page of `perftracker diff` (no scripts): `verdict` is the comparison's sentence (`json_report.diff_verdict`); `side_reports` links
    each side's own report (label -> path relative to the page)."""
    top = max((f.severity for f in findings), default=Severity.INFO)
    write_page(
        path, "diff.html.j2", title=title, verdict=verdict, verdict_class="ok" if top == Severity.INFO else top.label,
        findings=[{**f.to_dict(), "evidence_text": json.dumps(f.evidence, indent=1, default=str)[:20000]}
                  for f in findings],
        ops=_op_rows(ops), ranks=_rank_rows(ranks), summary=dict(summary),
        side_reports=dict(side_reports or {}))


@dataclass(frozen=True)
class StripCell:
    key: str  # the cell's id suffix (summary-<key>), for anchors and tests
    label: str
    value: str
    detail: str = ""


def _seconds(value: float) -> str:
    return number(value * 1e9, "ns")


def _finite(value: Any) -> float | None:
    try:
        number_ = float(value)
    except (TypeError, ValueError):
        return None
    return number_ if math.isfinite(number_) else None


def _step_cell(row: Any) -> StripCell | None:
    median = _finite(row.get("step_median_s"))
    if median is None:
        return None
    fastest, slowest = _finite(row.get("step_fastest_rank_s")), _finite(row.get("step_slowest_rank_s"))
    step_ranks = int(_finite(row.get("step_ranks")) or 0)
    if fastest is not None and slowest is not None and step_ranks > 1:
        detail = f"median over {step_ranks} ranks; spread across ranks {_seconds(slowest - fastest)}"
        if _seconds(fastest) != _seconds(slowest):  # a range that reads "135 ms to 135 ms" says nothing
            detail += f" ({_seconds(fastest)} to {_seconds(slowest)})"
    else:
        p90 = _finite(row.get("step_p90_s"))
        detail = "one rank" + (f"; p90 {_seconds(p90)}" if p90 is not None else "")
    return StripCell("step", "Step time", _seconds(median), detail)


def summary_strip(tables: Tables, findings: list[Finding]) -> list[StripCell]:
    """The strip's cells, in order (an older output without the `run_summary` table shows what findings give)."""
    cells: list[StripCell] = []
    run = table(tables, "run_summary")
    if not run.empty:
        row = run.iloc[0]
        step = _step_cell(row)
        if step is not None:
            cells.append(step)
        ranks = int(_finite(row.get("ranks")) or 0)
        if ranks:
            cells.append(StripCell("ranks", "Ranks", f"{ranks:,}"))
        hosts = int(_finite(row.get("hosts")) or 0)
        if hosts:
            names = str(row.get("host_names") or "")
            cells.append(StripCell("hosts", "Hosts", f"{hosts:,}", names if hosts <= 4 else ""))
    top = biggest_cost(findings)
    if top is not None:
        cells.append(StripCell("cost", "Biggest cost",
                               f"{_seconds(top.cost.seconds_per_step)} per step"
                               + (f" ({number(top.cost.share_of_step, 'share')} of the step)"
                                  if top.cost.share_of_step > 0 else ""), top.title))
    return cells
