"""Report sections drawn from traces and step times: GPU time breakdown, overlap, step time, stragglers, timeline.

Promise: each is a section function `(tables, findings) -> Section | None`, None when its charts have
nothing to draw; tables under the charts show at most 64 rows (the rest is in tables/).
"""

from __future__ import annotations

from perftracker.analyzers.findings import Finding
from perftracker.reports import charts
from perftracker.reports.sections import Section, Tables, grid, table

TEMPLATE = "section_table.html.j2"
BREAKDOWN_COLUMNS = {"rank": "rank", "window": "window", "compute_pct": "compute %",
                     "comm_exposed_pct": "exposed comm %", "memory_exposed_pct": "exposed memory %",
                     "idle_pct": "idle %", "overlap_pct": "comm overlapped %", "steps": "steps"}
STEP_COLUMNS = {"rank": "rank", "steps": "steps", "median_ms": "median ms", "p90_ms": "p90 ms", "max_ms": "max ms"}


def breakdown_section(tables: Tables, findings: list[Finding]) -> Section | None:
    bd = table(tables, "breakdown")
    figures = [f for f in (charts.breakdown_chart(bd),) if f]
    if not figures:
        return None
    return Section("breakdown", "GPU time breakdown", TEMPLATE, {"table": grid(bd, BREAKDOWN_COLUMNS)}, figures)


def overlap_section(tables: Tables, findings: list[Finding]) -> Section | None:
    figures = [f for f in (charts.overlap_chart(table(tables, "breakdown")),) if f]
    return Section("overlap", "Communication / compute overlap", TEMPLATE, {}, figures) if figures else None


def steps_section(tables: Tables, findings: list[Finding]) -> Section | None:
    stats = table(tables, "step_stats")
    changes = [int(f.evidence["change_step"]) for f in findings if "change_step" in f.evidence]
    figures = [f for f in (charts.step_time_chart(stats),
                           charts.step_series_chart(table(tables, "steps"), change_steps=changes)) if f]
    if not figures:
        return None
    shown = stats.assign(**{f"{c}_ms": (stats[f"{c}_s"] * 1e3) for c in ("median", "p90", "max")}) \
        if not stats.empty else stats
    data = {"table": grid(shown, STEP_COLUMNS)} if not stats.empty else {}
    return Section("steps", "Step time", TEMPLATE, data, figures)


def stragglers_section(tables: Tables, findings: list[Finding]) -> Section | None:
    figures = [f for f in (charts.lateness_heatmap(table(tables, "lateness")),
                           charts.wait_bars(table(tables, "rank_waits"))) if f]
    return Section("stragglers", "Stragglers at collectives", TEMPLATE, {}, figures) if figures else None


def timeline_section(tables: Tables, findings: list[Finding]) -> Section | None:
    figures = [f for f in (charts.timeline_chart(table(tables, "timeline")),) if f]
    return Section("timeline", "Timeline of a representative step", TEMPLATE, {}, figures) if figures else None
