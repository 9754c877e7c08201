"""Short outputs for schedulers and CI: a chat/ticket-ready text summary and a Prometheus text file.

`text_summary(document)` and `prometheus_text(document, tables)`; metrics not measured are left out, not written
as 0, and input text passes `text.printable`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.analyzers.findings import Kind
from perftracker.reports.text import first, printable

SEVERITIES = ("critical", "warning", "info")


def _ordered(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Actionable findings in the document's order (severity, then cost, then confidence)."""
    return [f for f in document.get("findings") or [] if f.get("severity") in ("critical", "warning")]


def headline(document: dict[str, Any]) -> str:
    """The verdict line of the document (it leads with its first actionable finding)."""
    return str((document.get("summary") or {}).get("verdict", "no verdict"))


def text_summary(document: dict[str, Any], report_path: str = "", limit: int = 3) -> str:
    """A few lines for a chat message or a ticket."""
    summary = document.get("summary") or {}
    counts = summary.get("counts") or {}
    lines = [f"perftracker: {headline(document)}",
             f"input: {document.get('input', '')} | findings: "
             + ", ".join(f"{counts.get(s, 0)} {s}" for s in SEVERITIES)]
    findings = _ordered(document)
    for i, f in enumerate(findings[:limit], 1):
        where = []
        if f.get("ranks"):
            where.append(f"ranks {first(f['ranks'])}")
        if f.get("hosts"):
            where.append(f"hosts {first(f['hosts'])}")
        cost = (f.get("cost") or {}).get("seconds_per_step", 0.0)
        if cost:
            where.append(f"~{cost * 1e3:.1f} ms/step")
        lines.append(f"{i}. [{f['severity'].upper()}] {f['title']}" + (f" ({'; '.join(where)})" if where else ""))
    if len(findings) > limit:
        lines.append(f"... {len(findings) - limit} more in findings.json")
    not_judged = (summary.get("coverage") or {}).get("not_judged") or []
    if not_judged and findings:  # without findings the verdict already says it
        lines.append("not judged, for lack of inputs: " + ", ".join(str(a.get("area")) for a in not_judged))
    if report_path:
        lines.append(f"report: {report_path}")
    return "\n".join(printable(line).replace("\n", " ") for line in lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _metric(out: list[str], name: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
    if not samples:
        return
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} gauge")
    for labels, value in samples:
        label_s = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        out.append(f"{name}{{{label_s}}} {value:.9g}" if label_s else f"{name} {value:.9g}")


def prometheus_text(document: dict[str, Any], tables: dict[str, pd.DataFrame] | None = None) -> str:
    """Headline metrics in the Prometheus text format (ends with a newline)."""
    tables = tables or {}
    summary = document.get("summary") or {}
    out: list[str] = []
    step = summary.get("step_time_s")
    _metric(out, "perftracker_step_time_seconds", "Median step time across ranks.",
            [({}, float(step))] if isinstance(step, (int, float)) else [])
    stragglers = [float((f.get("cost") or {}).get("seconds_per_step", 0.0)) for f in document.get("findings") or []
                  if f.get("analyzer") == Kind.STRAGGLER]
    waits = tables.get("rank_waits")
    if waits is not None and not waits.empty and "cost_per_step_s" in waits:
        stragglers.append(float(waits["cost_per_step_s"].max()))
    _metric(out, "perftracker_straggler_cost_seconds", "Seconds per step the other ranks wait for the slowest rank.",
            [({}, max(stragglers))] if stragglers else [])
    breakdown = tables.get("breakdown")
    overlap: list[tuple[dict[str, str], float]] = []
    if breakdown is not None and not breakdown.empty and "overlap_pct" in breakdown:
        with_comm = breakdown[breakdown["comm_ns"] > 0] if "comm_ns" in breakdown else breakdown
        if not with_comm.empty:
            overlap = [({}, float(with_comm["overlap_pct"].median()) / 100.0)]
    _metric(out, "perftracker_comm_overlap_ratio", "Share of communication time overlapped with compute (median rank).",
            overlap)
    counts = summary.get("counts") or {}
    _metric(out, "perftracker_findings", "Findings of the last analysis by severity.",
            [({"severity": s}, float(counts.get(s, 0))) for s in SEVERITIES])
    return "\n".join(out) + "\n"
