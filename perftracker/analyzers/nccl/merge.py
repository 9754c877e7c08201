"""One finding per problem (`one_per_subject`): the NCCL rules' findings about one subject merged into one."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.nccl.context import NcclFinding
from perftracker.evidence import as_evidence
from perftracker.evidence.network import NcclConfigEvidence, NcclProblem, NcclRuleEvidence

# Evidence lists that name where a value was seen; merged across the findings of one subject.
_SOURCES: tuple[Literal["env", "log", "sysfs"], ...] = ("env", "log", "sysfs")


def one_per_subject(findings: list[Finding]) -> list[Finding]:
    """Merge the findings that share an `evidence.subject` (docs/internals/analyzers.md)."""
    groups: dict[str, list[Finding]] = {}
    order: list[tuple[str, Finding | None]] = []
    for f in findings:
        subject = str(f.evidence.get("subject") or "")
        if not subject:
            order.append(("", f))
            continue
        if subject not in groups:
            groups[subject] = []
            order.append((subject, None))
        groups[subject].append(f)
    return [f if f is not None else _merge(subject, groups[subject]) for subject, f in order]


def problems(finding: Finding) -> list[NcclProblem]:
    """Every problem a (possibly merged) `nccl_config` finding stands for: flag, severity, title, evidence."""
    ev = as_evidence(finding.evidence, NcclConfigEvidence)
    own = _problem(finding, _without(ev, "problems"))
    return [own, *ev.get("problems", [])]


def _without(evidence: NcclConfigEvidence, *keys: Literal["flag", "subject", "problems"]) -> NcclConfigEvidence:
    copy = NcclConfigEvidence(**evidence)
    for key in keys:
        copy.pop(key, None)
    return copy


def _problem(f: Finding, evidence: NcclRuleEvidence) -> NcclProblem:
    return NcclProblem(flag=f.evidence.get("flag"), severity=f.severity.label, title=f.title,
                       recommendation=f.recommendation, evidence=evidence)


def _merge(subject: str, group: list[Finding]) -> Finding:
    if len(group) == 1:  # the subject was only the key to merge by
        alone = group[0]
        return replace(alone, evidence=_without(as_evidence(alone.evidence, NcclConfigEvidence), "subject"))
    primary = max(group, key=lambda f: (f.severity, -group.index(f)))
    others = [f for f in group if f is not primary]
    evidence = NcclConfigEvidence(**as_evidence(primary.evidence, NcclConfigEvidence))
    for name in _SOURCES:
        mine = evidence.get(name)
        seen = [*mine] if isinstance(mine, list) else []
        for f in others:
            value = f.evidence.get(name)
            if isinstance(value, list):
                seen.extend(v for v in value if v not in seen)
        if seen:
            evidence[name] = seen
    evidence["problems"] = [_problem(f, _without(as_evidence(f.evidence, NcclConfigEvidence), "flag", "subject"))
                            for f in others]
    recommendations = list(dict.fromkeys([primary.recommendation, *(f.recommendation for f in others)]))
    n = len(others)
    if isinstance(primary, NcclFinding):  # the merged finding is about every variable its problems name
        primary = replace(primary, variables=tuple(sorted({v for f in group for v in getattr(f, "variables", ())})))
    return replace(
        primary, title=f"{primary.title} (and {n} more problem{'s' if n > 1 else ''} with {subject})",
        recommendation=" ".join(recommendations), evidence=evidence,
        hosts=tuple(sorted({h for f in group for h in f.hosts})),
        ranks=tuple(sorted({r for f in group for r in f.ranks})))
