"""findings.json read back as untrusted input: bounded, checked field by field, never a crash.

`read_document` reads it within bounds; `checked_findings`, `checked_notes` and `checked_summary` keep what has
the shape perftracker writes and say why for the rest. Every error is an InputError (exit 2, never 70).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from perftracker.analyzers.findings import Finding, Severity
from perftracker.bounded import loads_json, read_text
from perftracker.containment import inside, special_place
from perftracker.errors import InputError
from perftracker.values import MAX_RANK

MAX_FINDINGS_FILE_BYTES = 512 * 1024 * 1024
MAX_FINDINGS = 2000  # a report of more is unreadable (and 10^5 took 50 s and 291 MB): the rest are counted
_SEVERITIES = {s.label for s in Severity}


def read_document(path: Path, follow_links: bool = False) -> dict[str, Any]:
    """The JSON object in `path`, read within bounds (InputError for anything else, and for a symlink that
    leads outside its folder unless `follow_links`; never one into /proc, /sys or /dev)."""
    if not path.exists() and not path.is_symlink():
        raise InputError("no findings.json here", str(path.parent),
                         "run `perftracker analyze <traces> -o <dir>` first")
    if path.is_symlink():
        target = os.path.realpath(path)
        if special_place(path):
            raise InputError(f"a symlink to {target} (in {special_place(path)}): never read", str(path),
                             "replace it with the findings.json perftracker wrote")
        if not follow_links and not inside(path, os.path.realpath(path.parent)):
            raise InputError(f"a symlink leading outside its folder, to {target}: not read", str(path),
                             "give --follow-links to read files that links lead to, or copy the file in")
    try:
        text, capped = read_text(path, MAX_FINDINGS_FILE_BYTES)
        if capped.left_out:
            raise ValueError(f"larger than {MAX_FINDINGS_FILE_BYTES:,} bytes")
        document = loads_json(text)
    except InputError:
        raise
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read findings ({exc})", str(path), "re-run perftracker analyze") from None
    if not isinstance(document, dict):
        raise InputError("not a perftracker findings file (not a JSON object)", str(path),
                         "re-run perftracker analyze")
    return document


def _finite(value: Any, low: float = 0.0, high: float = math.inf) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and low <= value <= high


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def finding_problem(raw: Any) -> str:
    """Why `raw` is not a finding perftracker writes ("" when it is one)."""
    if not isinstance(raw, dict):
        return "not an object"
    for key in ("analyzer", "title"):
        if not isinstance(raw.get(key), str):
            return f"{key} is not text"
    if raw.get("severity") not in _SEVERITIES:
        return "severity is not info, warning or critical"
    for key in ("recommendation", "id"):
        if key in raw and not isinstance(raw[key], str):
            return f"{key} is not text"
    ranks = raw.get("ranks", [])
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r <= MAX_RANK
                                              for r in ranks):
        return f"ranks are not integers from 0 to {MAX_RANK}"
    for key in ("hosts", "related"):
        if not _strings(raw.get(key, [])):
            return f"{key} are not a list of text"
    if not isinstance(raw.get("evidence", {}), dict):
        return "evidence is not an object"
    cost = raw.get("cost", {})
    if not isinstance(cost, dict) or not all(_finite(cost.get(k, 0.0)) for k in ("seconds_per_step", "share_of_step")):
        return "cost is not finite non-negative numbers"
    confidence = raw.get("confidence")
    if confidence is not None and not _finite(confidence, 0.0, 1.0):
        return "confidence is not a number from 0 to 1"
    return ""


def checked_findings(document: dict[str, Any], path: Path) -> tuple[list[Finding], list[str]]:
    """The document's findings of the right shape (at most MAX_FINDINGS), and a sentence per problem."""
    raw = document.get("findings", [])
    if not isinstance(raw, list):
        raise InputError("its findings are not a list", str(path), "re-run perftracker analyze to write it again")
    findings: list[Finding] = []
    problems: list[str] = []
    for i, item in enumerate(raw[:MAX_FINDINGS]):
        problem = finding_problem(item)
        if problem:
            problems.append(f"finding {i + 1} is not one perftracker wrote ({problem}): left out")
            continue
        findings.append(Finding.from_dict(item))
    if len(raw) > MAX_FINDINGS:
        problems.append(f"{len(raw) - MAX_FINDINGS:,} findings beyond the first {MAX_FINDINGS:,} are not shown "
                        f"(the file holds {len(raw):,})")
    return findings, problems


def checked_notes(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's notes that have the shape perftracker writes (at most MAX_FINDINGS)."""
    raw = document.get("notes", [])
    if not isinstance(raw, list):
        return []
    return [n for n in raw[:MAX_FINDINGS] if isinstance(n, dict) and all(isinstance(n.get(k), str)
                                                                         for k in ("level", "source", "message"))
            and isinstance(n.get("data", {}), dict)]


def checked_summary(document: dict[str, Any]) -> dict[str, Any]:
    """The summary fields the report reads, each kept only when of the shape perftracker writes."""
    raw = document.get("summary")
    if not isinstance(raw, dict):
        return {}
    summary = dict(raw)
    coverage = summary.get("coverage")
    if not (isinstance(coverage, dict) and all(isinstance(coverage.get(k, []), list)
                                               and all(isinstance(a, dict) and isinstance(a.get("area", ""), str)
                                                       for a in coverage.get(k, []))
                                               for k in ("judged", "not_judged"))):
        summary.pop("coverage", None)
    synthetic = summary.get("synthetic_inputs")
    if synthetic is not None and not (isinstance(synthetic, list) and all(isinstance(s, dict) for s in synthetic)):
        summary.pop("synthetic_inputs", None)
    return summary
