"""findings.json: the versioned, documented output for automation, and how it is read back.

`build` returns the document `write` saves, shaped as `perftracker/schemas/findings.schema.json` (additive changes
only within a `SCHEMA_VERSION`); its summary is the typed `Summary`. Findings are ordered by severity, cost,
then confidence. `read` takes a findings.json as untrusted input: bounded (`read_document`), checked field by
field (`checked_findings`, `checked_notes`, `checked_summary`), never a crash (an InputError, exit 2).
"""


from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perftracker._version import __version__
from perftracker.analyzers.findings import Finding, Severity, rank_findings, safe_evidence
from perftracker.bounded import loads_json, read_text
from perftracker.containment import inside, special_place
from perftracker.errors import InputError
from perftracker.redaction import safe_text
from perftracker.rundir import atomic_write_text
from perftracker.values import MAX_RANK

if TYPE_CHECKING:
    from perftracker.store import LoadNote

SCHEMA_VERSION = 1
_FACTS = ("ranks", "hosts", "coverage", "step_time_s", "step_spread_across_ranks_s", "hta_compat", "synthetic_inputs")
MAX_FINDINGS_FILE_BYTES = 512 * 1024 * 1024
MAX_FINDINGS = 2000  # a report of more is unreadable (and 10^5 took 50 s and 291 MB): the rest are counted
_SEVERITIES = {s.label for s in Severity}


@dataclass(frozen=True)
class BiggestCost:
    """The finding that costs the most time per step (`summary.biggest_cost`)."""

    finding: str
    title: str
    seconds_per_step: float
    share_of_step: float

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding, "title": self.title, "seconds_per_step": round(self.seconds_per_step, 9),
                "share_of_step": round(self.share_of_step, 6)}


@dataclass(frozen=True)
class RunFacts:
    """What an analysis says about the run itself: ranks and hosts any input names, what could be judged
    (`analyzers.coverage`), the median step and the spread across ranks (None without steps), whether HTA's
    definitions were used, and the made-up inputs a run declares (empty for a real run: no key written)."""

    ranks: int | None = None
    hosts: list[str] | None = None
    coverage: dict[str, Any] | None = None
    step_time_s: float | None = None
    step_spread_across_ranks_s: float | None = None
    hta_compat: bool | None = None
    synthetic_inputs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _FACTS if name != "synthetic_inputs"}
        if self.synthetic_inputs:  # only runs that say so: a real run's summary has no such key
            out["synthetic_inputs"] = self.synthetic_inputs
        return out


@dataclass(frozen=True)
class Summary:
    """findings.json's summary, typed: the one-line verdict, the count per severity, the largest cost per step
    and the finding that has it, the run's facts (an analysis) or the comparison (`diff`, a diff.json), and any
    other key a writer adds (`extra`: sanity's)."""

    verdict: str
    counts: dict[str, int]
    worst_cost_seconds_per_step: float = 0.0
    biggest_cost: BiggestCost | None = None
    facts: RunFacts | None = None
    diff: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def coverage(self) -> dict[str, Any] | None:
        return self.facts.coverage if self.facts is not None else None

    @property
    def synthetic_inputs(self) -> list[dict[str, Any]]:
        return self.facts.synthetic_inputs if self.facts is not None else []

    def to_dict(self) -> dict[str, Any]:
        """The summary's keys, in findings.json's order."""
        return {"verdict": self.verdict, "counts": dict(self.counts),
                "worst_cost_seconds_per_step": round(self.worst_cost_seconds_per_step, 9),
                "biggest_cost": None if self.biggest_cost is None else self.biggest_cost.to_dict(),
                **(self.facts.to_dict() if self.facts is not None else {}),
                **({"diff": self.diff} if self.diff is not None else {}), **self.extra}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Summary:
        """A saved summary (checked by `checked_summary`) as a Summary; a value of the wrong shape
        is left out (None), never raised."""
        counts = raw.get("counts")
        big = raw.get("biggest_cost")
        facts = RunFacts(
            ranks=_of(raw.get("ranks"), int), hosts=[str(h) for h in _of(raw.get("hosts"), list) or []] or None,
            coverage=_of(raw.get("coverage"), dict), step_time_s=_number(raw.get("step_time_s")),
            step_spread_across_ranks_s=_number(raw.get("step_spread_across_ranks_s")),
            hta_compat=_of(raw.get("hta_compat"), bool),
            synthetic_inputs=[s for s in _of(raw.get("synthetic_inputs"), list) or [] if isinstance(s, dict)],
        ) if any(k in raw for k in _FACTS) else None
        return cls(
            verdict=str(raw.get("verdict", "no verdict")),
            counts={str(k): int(v) for k, v in counts.items() if isinstance(v, int)} if isinstance(counts, dict)
            else {},
            worst_cost_seconds_per_step=_number(raw.get("worst_cost_seconds_per_step")) or 0.0,
            biggest_cost=BiggestCost(str(big.get("finding", "")), str(big.get("title", "")),
                                     _number(big.get("seconds_per_step")) or 0.0,
                                     _number(big.get("share_of_step")) or 0.0) if isinstance(big, dict) else None,
            facts=facts, diff=_of(raw.get("diff"), dict),
            extra={k: v for k, v in raw.items() if k not in {*_FACTS, "verdict", "counts", "diff", "biggest_cost",
                                                             "worst_cost_seconds_per_step"}},
        )


def _of(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


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
    return {s.label: sum(f.severity == s for f in findings) for s in Severity}


def biggest_cost(findings: list[Finding]) -> Finding | None:
    """The finding that costs the most time per step (the first in the ranked order among equals); None when
    no finding has a cost."""
    costly = [f for f in findings if f.cost.seconds_per_step > 0]
    return max(costly, key=lambda f: f.cost.seconds_per_step) if costly else None


def summary_of(findings: list[Finding], facts: RunFacts | None = None, diff: dict[str, Any] | None = None,
               extra: Mapping[str, Any] | None = None, verdict_text: str | None = None) -> Summary:
    """The summary of these findings (`verdict_text`: the verdict, when not that of an analysis: a diff's)."""
    top = biggest_cost(findings)
    coverage = facts.coverage if facts is not None else (extra or {}).get("coverage")
    return Summary(
        verdict=verdict_text if verdict_text is not None else verdict(findings, coverage),
        counts=_counts(findings), worst_cost_seconds_per_step=max((f.cost.seconds_per_step for f in findings),
                                                                  default=0.0),
        biggest_cost=None if top is None else BiggestCost(top.id, top.title, top.cost.seconds_per_step,
                                                          top.cost.share_of_step),
        facts=facts, diff=diff, extra=dict(extra or {}))


def build(findings: list[Finding], notes: list[LoadNote], input_path: str,
          summary: Summary | Mapping[str, Any]) -> dict[str, Any]:
    """The findings.json document of `summary` (or, given the keys a writer adds, the summary of `findings`
    with them)."""
    if not isinstance(summary, Summary):
        summary = summary_of(findings, extra=summary)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "perftracker", "version": __version__},
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "input": input_path,
        "summary": summary.to_dict(),
        "notes": [n.to_dict() for n in notes],
        "findings": [f.to_dict() for f in findings],
    }


def write(path: Path, document: dict[str, Any]) -> None:
    """The document as JSON; its input, summary (host names, the diff's labels) and notes' data through the one
    redaction (`safe_evidence`: `redaction.safe_text` on every string and key; findings passed it when made)."""
    shown = {**document, "input": safe_text(str(document.get("input", "")))} if "input" in document else dict(document)
    if isinstance(document.get("summary"), dict):
        shown["summary"] = safe_evidence(document["summary"])
    if isinstance(document.get("notes"), list):  # a note's data (the files it names) too
        shown["notes"] = [safe_evidence(n) if isinstance(n, dict) else n for n in document["notes"]]
    atomic_write_text(path, json.dumps(shown, indent=2, default=str) + "\n")


def read(path: Path, follow_links: bool = False) -> tuple[dict[str, Any], list[Finding]]:
    """The document and its findings, read as untrusted input (`read_document`, `checked_*`): the findings and notes of
    the shape perftracker writes, a note for each left out, the summary fields the report reads checked;
    InputError when the file is missing, unreadable or not ours."""
    document = read_document(path, follow_links)
    if document.get("schema_version") != SCHEMA_VERSION:
        raise InputError("not a perftracker findings file of a supported version", str(path),
                         "re-run perftracker analyze with this version")
    findings, problems = checked_findings(document, path)
    notes = checked_notes(document) + [{"level": "warning", "source": str(path), "message": p} for p in problems]
    return {**document, "notes": notes, "summary": checked_summary(document)}, findings


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
        listed = raw.get(key, [])
        if not (isinstance(listed, list) and all(isinstance(v, str) for v in listed)):
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
