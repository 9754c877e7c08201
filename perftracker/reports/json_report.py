"""findings.json: the versioned, documented output for automation.

Promise: `build` returns the document `write` saves; its shape is `perftracker/schemas/findings.schema.json`
(JSON Schema, shipped in the package; `diff` adds `summary.diff`: `diff.schema.json`), described once in
docs/formats/findings-json.md with the versioning rule: within one `SCHEMA_VERSION`, additive changes only
(a new optional key, declared in the schema in the same change).

Findings are ordered by severity (critical first), then cost (seconds lost per step), then confidence;
the verdict's "Top:" is the first actionable finding of that order.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perftracker import __version__
from perftracker.analyzers.findings import Finding, Severity, rank_findings
from perftracker.errors import InputError
from perftracker.reports.findings_file import checked_findings, checked_notes, checked_summary, read_document
from perftracker.rundir import atomic_write_text
from perftracker.store import LoadNote

SCHEMA_VERSION = 1


def verdict(findings: list[Finding], coverage: dict[str, Any] | None = None) -> str:
    """One line: the first actionable finding in the one order (`rank_findings`), or that nothing needs
    attention (and, given the analysis's coverage, in which areas, and which could not be judged)."""
    actionable = rank_findings(f for f in findings if f.severity >= Severity.WARNING)
    if not actionable:
        if not coverage or not coverage.get("judged"):
            return "No problems found in what was analyzed."
        text = "No problems found in: " + ", ".join(a["area"] for a in coverage["judged"]) + "."
        if coverage.get("not_judged"):
            text += " Not judged, for lack of inputs: " + ", ".join(a["area"] for a in coverage["not_judged"]) + "."
        return text
    counts = _counts(findings)
    top = actionable[0]
    cost = ""
    if top.cost.seconds_per_step > 0:
        cost = f" (~{top.cost.seconds_per_step * 1e3:.1f} ms/step, {100 * top.cost.share_of_step:.0f}% of the step)"
    head = ", ".join(f"{counts[s]} {s}{'s' if s == 'warning' and counts[s] != 1 else ''}"
                     for s in ("critical", "warning") if counts[s])  # "2 critical, 5 warnings"
    return f"{head}. Top: {top.title}{cost}."


def diff_verdict(findings: list[Finding]) -> str:
    """The one sentence of a comparison (`perftracker diff`): how many changes beat the noise of running the
    same job twice, and the first of them (in the comparison's order), or that none did. The terminal, diff.json and diff.html
    all say this sentence."""
    loud = [f for f in findings if f.severity >= Severity.WARNING]
    if not loud:
        return "No change beyond the noise of running the same job twice."
    return f"{len(loud)} change(s) beyond the runs' noise. Top: {loud[0].title}"


def _counts(findings: list[Finding]) -> dict[str, int]:
    counts = {s.label: 0 for s in Severity}
    for f in findings:
        counts[f.severity.label] += 1
    return counts


def biggest_cost(findings: list[Finding]) -> Finding | None:
    """The finding that costs the most time per step (the first in the ranked order among equals); None when
    no finding has a cost."""
    costly = [f for f in findings if f.cost.seconds_per_step > 0]
    return max(costly, key=lambda f: f.cost.seconds_per_step) if costly else None


def build(findings: list[Finding], notes: list[LoadNote], input_path: str, summary_extra: dict[str, Any],
          verdict_text: str | None = None) -> dict[str, Any]:
    """The findings.json document (`verdict_text`: the verdict, when not that of an analysis: a diff's)."""
    worst = max((f.cost.seconds_per_step for f in findings), default=0.0)
    top = biggest_cost(findings)
    biggest = None if top is None else {"finding": top.id, "title": top.title,
                                        "seconds_per_step": round(top.cost.seconds_per_step, 9),
                                        "share_of_step": round(top.cost.share_of_step, 6)}
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "perftracker", "version": __version__},
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "input": input_path,
        "summary": {"verdict": verdict_text if verdict_text is not None else verdict(findings, summary_extra.get("coverage")), "counts": _counts(findings),
                    "worst_cost_seconds_per_step": round(worst, 9), "biggest_cost": biggest, **summary_extra},
        "notes": [n.to_dict() for n in notes],
        "findings": [f.to_dict() for f in findings],
    }


def write(path: Path, document: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(document, indent=2, default=str) + "\n")


def read(path: Path, follow_links: bool = False) -> tuple[dict[str, Any], list[Finding]]:
    """The document and its findings, read as untrusted input (`findings_file`): the findings and notes of
    the shape perftracker writes, a note for each left out, the summary fields the report reads checked;
    InputError when the file is missing, unreadable or not ours."""
    document = read_document(path, follow_links)
    if document.get("schema_version") != SCHEMA_VERSION:
        raise InputError("not a perftracker findings file of a supported version", str(path),
                         "re-run perftracker analyze with this version")
    findings, problems = checked_findings(document, path)
    notes = checked_notes(document) + [{"level": "warning", "source": str(path), "message": p} for p in problems]
    return {**document, "notes": notes, "summary": checked_summary(document)}, findings
