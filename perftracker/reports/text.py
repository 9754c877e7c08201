"""The terminal summary (a verdict line and the ranked findings, with rich) and the short outputs for schedulers
and CI: `text_summary(document)`, a chat/ticket-ready text, and `prometheus_text(document, tables)`, whose metrics
not measured are left out, not written as 0. Text from inputs passes `printable` (no control characters) and is
never read as rich markup.
"""


from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from perftracker.analyzers.findings import Finding, Kind
from perftracker.reports.json_report import verdict

if TYPE_CHECKING:  # the voice of every command imports this module: pandas only where a table is drawn
    import pandas as pd

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}
# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), bidirectional marks and overrides
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SEVERITIES = ("critical", "warning", "info")


def printable(text: object) -> str:
    """`text` as a string without the control characters a terminal would act on (tabs and newlines stay)."""
    return _CONTROL.sub("", str(text))


def first(values: Sequence[object], limit: int = 6) -> str:
    """The first `limit` of `values` joined, "..." when there are more."""
    return ", ".join(str(v) for v in values[:limit]) + ("..." if len(values) > limit else "")


def print_summary(console: Console, findings: list[Finding], report: Path | None, limit: int = 12,
                  coverage: dict[str, Any] | None = None, synthetic: list[dict[str, Any]] | None = None) -> None:
    """`coverage` and `synthetic` are the summary's `coverage` and `synthetic_inputs` of findings.json."""
    console.print(f"[bold]Verdict:[/bold] {_plain(verdict(findings, coverage))}", highlight=False, markup=True)
    if synthetic:
        made_up = "; ".join(("every input" if s.get("path") == "." else str(s.get("path"))) + f": {s.get('what', '')}"
                            for s in synthetic)
        console.print(f"[bold yellow]Synthetic inputs[/bold yellow] (made up, not collected): {_plain(made_up)}",
                      highlight=False, markup=True)
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("severity")
    table.add_column("finding", overflow="fold")
    table.add_column("ms/step", justify="right")
    table.add_column("ranks", overflow="fold")
    shown = findings[:limit]
    with_hosts = any(f.hosts for f in shown)  # host findings (NCCL, RDMA, GPU health) name hosts, not ranks
    if with_hosts:
        table.add_column("hosts", overflow="fold")
    for f in shown:
        cost = f"{f.cost.seconds_per_step * 1e3:.1f}" if f.cost.seconds_per_step > 0 else ""
        row = [f"[{_STYLE[f.severity.label]}]{f.severity.label}[/]", _plain(f.title), cost, first(f.ranks)]
        if with_hosts:
            row.append(_plain(first(f.hosts, 4)))
        table.add_row(*row)
    console.print(table)
    if len(findings) > limit:
        console.print(f"... and {len(findings) - limit} more in findings.json")
    not_judged = (coverage or {}).get("not_judged") or []
    if not_judged:
        console.print("Not judged, for lack of inputs: " + ", ".join(str(a["area"]) for a in not_judged)
                      + " (what each needs: the report, or summary.coverage in findings.json)",
                      highlight=False, markup=False)
    if report is not None:
        console.print(f"Report: {printable(report)}", highlight=False, markup=False)


def _plain(text: str) -> str:
    """Trace content must not act on the terminal nor be read as rich markup."""
    return printable(text).replace("[", "\\[")


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
    findings = [f for f in document.get("findings") or [] if f.get("severity") in ("critical", "warning")]
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
