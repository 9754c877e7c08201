"""diff.html: the page of `perftracker diff`, one small self-contained file (no scripts), from findings and tables:
the verdict, its findings, the ops and ranks that changed, links to each side's report; escaped by the template.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.analyzers.findings import Finding, Severity
from perftracker.reports.templating import write_page

MAX_ROWS = 60


def _op_rows(ops: pd.DataFrame) -> list[dict[str, Any]]:
    if ops.empty:
        return []
    moved = ops[ops["change"] != "same"].head(MAX_ROWS)
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


def render(path: Path, findings: list[Finding], ops: pd.DataFrame, ranks: pd.DataFrame,
           summary: Mapping[str, Any], title: str, verdict: str, side_reports: Mapping[str, str] | None = None) -> None:
    """Write the page; `verdict` is the comparison's sentence (`json_report.diff_verdict`); `side_reports` links
    each side's own report (label -> path relative to the page)."""
    top = max((f.severity for f in findings), default=Severity.INFO)
    write_page(
        path, "diff.html.j2", title=title, verdict=verdict, verdict_class="ok" if top == Severity.INFO else top.label,
        findings=[{**f.to_dict(), "evidence_text": json.dumps(f.evidence, indent=1, default=str)[:20000]}
                  for f in findings],
        ops=_op_rows(ops), ranks=_rank_rows(ranks), summary=dict(summary),
        side_reports=dict(side_reports or {}))
