"""The terminal summary: a verdict line and the ranked findings, with rich.

Text from inputs reaches the terminal through `printable`, without control characters, and is never read as
rich markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from perftracker.analyzers.findings import Finding
from perftracker.reports.json_report import verdict

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}
# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), bidirectional marks and overrides
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


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
