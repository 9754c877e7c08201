"""One cause, one finding across the failure analyzers: what a wait-for root explains is folded into it.

`fold_failures(findings)` (a finding pass) and `fold_into(roots, others)` (the crash analyzer's own) keep what
a root of the wait-for graph explains in the root's evidence (`folded`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from perftracker.analyzers.common import clock_utc
from perftracker.analyzers.failures.roots import explained_ranks
from perftracker.analyzers.findings import Finding, Kind, Mark, Severity
from perftracker.evidence import as_evidence
from perftracker.evidence.common import Folded, PassEvidence
from perftracker.evidence.failures import CrashEvidence, SilentHostEvidence

FAILURE_ANALYZERS = (Kind.CRASH, Kind.HANG, Kind.SILENT_HOST)
_CAUSE_ORDER: dict[str, int] = {Kind.SILENT_HOST: 0, Kind.CRASH: 1, Kind.HANG: 2}


def _silent_clause(f: Finding) -> str:
    ev = as_evidence(f.evidence, SilentHostEvidence)
    seen = ev.get("last_sample_ns")
    when = f" at {clock_utc(seen)}" if isinstance(seen, int) and seen > 0 else ""
    return f"host {ev.get('host', '?')} went silent{when}"


def entries(findings: list[Finding]) -> list[Folded]:
    """What the evidence of the finding they are folded into keeps of `findings`."""
    return [{"analyzer": f.analyzer, "id": f.id, "title": f.title} for f in findings]


def with_folded(f: Finding, folded: list[Folded]) -> dict[str, object]:
    """`f`'s evidence with `folded` added to the findings already folded into it."""
    return {**f.evidence, "folded": [*as_evidence(f.evidence, PassEvidence).get("folded", []), *folded]}


def fold_into(roots: list[Finding], others: list[Finding],
              eligible: Callable[[Finding], bool] = lambda f: True) -> list[Finding]:
    """`roots`, then the findings of `others` they do not explain. An eligible finding naming only root ranks or
    ranks waiting behind a root, or only a root's hosts, is kept in the evidence (`folded`) of the first root
    sharing a rank or a host with it (else the first root); a folded silent host names itself in the title."""
    root_ranks, behind = explained_ranks(roots)
    hosts = {h for f in roots for h in f.hosts}
    folded: dict[int, list[Finding]] = {}
    kept: list[Finding] = []
    for f in others:
        named = set(f.ranks)
        if eligible(f) and (named and named <= root_ranks | behind or not named and f.hosts and set(f.hosts) <= hosts):
            target = next((i for i, r in enumerate(roots) if named & set(r.ranks) or set(f.hosts) & set(r.hosts)), 0)
            folded.setdefault(target, []).append(f)
        else:
            kept.append(f)
    out: list[Finding] = []
    for i, root in enumerate(roots):
        extra = folded.get(i, [])
        if extra:
            silent = [_silent_clause(f) for f in extra if f.analyzer == Kind.SILENT_HOST and set(f.ranks) & set(root.ranks)]
            title = root.title if not silent else f"{root.title} ({'; '.join(silent)})"
            root = replace(root, title=title, evidence=with_folded(root, entries(extra[:32])))
        out.append(root)
    return [*out, *kept]


def _lost_peer(f: Finding) -> bool:
    """The first-failure finding when the first error is about a lost peer: a consequence by its own account."""
    return Mark.FIRST_FAILURE.on(f) and bool(as_evidence(f.evidence, CrashEvidence).get("consequence_of_a_lost_peer"))


def fold_failures(findings: list[Finding]) -> list[Finding]:
    roots = [f for f in findings if Mark.WAIT_ROOT.on(f)]
    if roots:
        return fold_into(roots, [f for f in findings if not Mark.WAIT_ROOT.on(f)], lambda f: (
            f.analyzer in FAILURE_ANALYZERS and f.severity >= Severity.WARNING))
    lost = [f for f in findings if _lost_peer(f)]
    causes = sorted((f for f in findings if f.analyzer in FAILURE_ANALYZERS and f.severity == Severity.CRITICAL
                     and not _lost_peer(f) and set(f.ranks)),
                    key=lambda f: _CAUSE_ORDER.get(f.analyzer, 9) + (1 if Mark.FIRST_FAILURE.on(f) else 0))
    if not lost or not causes:
        return findings
    cause = causes[0]
    merged = replace(cause, evidence=with_folded(cause, entries(lost)))
    return [merged if f is cause else f for f in findings if not _lost_peer(f)]
