"""One finding per problem (`one_per_subject`): the NCCL rules' findings about one subject merged into one."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.nccl.context import NcclFinding
from perftracker.evidence import as_evidence
from perftracker.evidence.network import NcclConfigEvidence, NcclProblem

# Evidence lists that name where a value was seen; merged across the findings of one subject.
_SOURCES: tuple[Literal["env", "log", "sysfs"], ...] = ("env", "log", "sysfs")


def one_per_subject(findings: list[Finding]) -> list[Finding]:
    """Merge the findings that share an `evidence.subject` (docs/internals/analyzers.md)."""
    groups: dict[str | int, list[Finding]] = {}
    for f in findings:  # a finding without a subject is a group of its own
        groups.setdefault(str(f.evidence.get("subject") or "") or id(f), []).append(f)
    return [_merge(key, group) if isinstance(key, str) else group[0] for key, group in groups.items()]


def problems(finding: Finding) -> list[NcclProblem]:
    """Every problem a (possibly merged) `nccl_config` finding stands for: flag, severity, title, evidence."""
    return [_problem(finding, "problems"), *as_evidence(finding.evidence, NcclConfigEvidence).get("problems", [])]


def _without(f: Finding, *keys: Literal["flag", "subject", "problems"]) -> NcclConfigEvidence:
    """A copy of an `nccl_config` finding's evidence without `keys`."""
    copy = NcclConfigEvidence(**as_evidence(f.evidence, NcclConfigEvidence))
    for key in keys:
        copy.pop(key, None)
    return copy


def _problem(f: Finding, *leave_out: Literal["flag", "subject", "problems"]) -> NcclProblem:
    return NcclProblem(flag=f.evidence.get("flag"), severity=f.severity.label, title=f.title,
                       recommendation=f.recommendation, evidence=_without(f, *leave_out))


def _merge(subject: str, group: list[Finding]) -> Finding:
    if len(group) == 1:  # the subject was only the key to merge by
        return replace(group[0], evidence=_without(group[0], "subject"))
    primary = max(group, key=lambda f: (f.severity, -group.index(f)))
    others = [f for f in group if f is not primary]
    evidence = _without(primary)
    for name in _SOURCES:
        seen = [*mine] if isinstance(mine := evidence.get(name), list) else []
        for f in others:
            value = f.evidence.get(name)
            if isinstance(value, list):
                seen.extend(v for v in value if v not in seen)
        if seen:
            evidence[name] = seen
    evidence["problems"] = [_problem(f, "flag", "subject") for f in others]
    recommendations = list(dict.fromkeys([primary.recommendation, *(f.recommendation for f in others)]))
    n = len(others)
    if isinstance(primary, NcclFinding):  # the merged finding is about every variable its problems name
        primary = replace(primary, variables=tuple(sorted({v for f in group for v in getattr(f, "variables", ())})))
    return replace(
        primary, title=f"{primary.title} (and {n} more problem{'s' if n > 1 else ''} with {subject})",
        recommendation=" ".join(recommendations), evidence=evidence,
        hosts=tuple(sorted({h for f in group for h in f.hosts})),
        ranks=tuple(sorted({r for f in group for r in f.ranks})))
