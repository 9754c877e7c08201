"""One cause, one finding in a watcher's incident: what the rank the others wait for explains is folded into it."""

from __future__ import annotations

from dataclasses import replace

from perftracker.analyzers.failures.fold import with_folded
from perftracker.analyzers.findings import Finding, Kind, Mark, Severity
from perftracker.evidence import as_evidence
from perftracker.evidence.common import Folded, PassEvidence

SAME_RANK = (Kind.BASELINE_SHIFT, Kind.CPU_CONTENTION, Kind.STACK_PROFILE)
FROM_TRACES = (Kind.STRAGGLER, Kind.NCCL_STRAGGLER)


def _explained(f: Finding, rank: int) -> bool:
    if f.severity < Severity.WARNING:
        return False
    if Mark.DEGRADATION_CHANGE.on(f):
        return not f.ranks or tuple(f.ranks) == (rank,)
    return f.analyzer in SAME_RANK and tuple(f.ranks) == (rank,)


def _entry(f: Finding) -> Folded:
    return {"analyzer": f.analyzer, "title": f.title, "id": f.id}


def fold_into_waited_rank(findings: list[Finding]) -> list[Finding]:
    waited = [f for f in findings if f.analyzer == Kind.WAITED_RANK]
    if len(waited) != 1:
        return findings
    root = waited[0]
    traced = [f for f in findings if f.analyzer in FROM_TRACES and f.severity >= Severity.WARNING
              and tuple(f.ranks) == tuple(root.ranks)]
    if traced:
        into = traced[0]
        richer = replace(into, evidence=with_folded(into, [_entry(root)]))
        return [richer if f is into else f for f in findings if f is not root]
    folded = [f for f in findings if f is not root and _explained(f, root.ranks[0])]
    if not folded:
        return findings
    costly = max([root, *folded], key=lambda f: f.cost.seconds_per_step)
    evidence = {**root.evidence, "folded": [_entry(f) for f in folded]}
    source = as_evidence(costly.evidence, PassEvidence).get("cost_source")
    if costly is not root and source is not None:
        evidence["cost_source"] = source
    merged = replace(root, severity=max(f.severity for f in [root, *folded]), cost=costly.cost, evidence=evidence)
    gone = {id(f) for f in folded}
    return [merged if f is root else f for f in findings if id(f) not in gone]
