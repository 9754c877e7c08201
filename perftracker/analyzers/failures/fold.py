"""One cause, one finding across the failure analyzers: what a wait-for root explains is folded into it.

Promise: `fold_failures(findings)`: when no root finding of the wait-for graph is among them (`crash`
findings keyed `crash:root:`: there were no flight-recorder dumps), only a first failure whose error is
about a lost peer (a consequence by its own account) is folded into the finding naming the cause (a
silent host, a rank that never joined a timed-out collective, a stack-hang suspect). Otherwise every warning or critical finding
of the failure analyzers (`hang` from stacks, `silent_host`, other `crash` rules) that names only root
ranks or ranks waiting behind a root, or only a root's hosts, is removed and kept in the root's evidence
(`folded`: its analyzer, title and id). A dead node (`silent_host`) folded into a root adds its clause to
the root's title ("host node-3 went silent at 10:02:11 UTC"), since that is the strongest evidence of
what the root ranks last did. Findings naming any other rank stay as they are.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from perftracker.analyzers.failures.roots import explained_ranks
from perftracker.analyzers.findings import Finding, Kind, Severity

FAILURE_ANALYZERS = (Kind.CRASH, Kind.HANG, Kind.SILENT_HOST)


def _is_root(f: Finding) -> bool:
    return f.analyzer == Kind.CRASH and f.key.startswith("crash:root:")


def _explained(f: Finding, ranks: set[int], hosts: set[str]) -> bool:
    if f.analyzer not in FAILURE_ANALYZERS or _is_root(f) or f.severity < Severity.WARNING:
        return False
    named = set(f.ranks)
    return bool(named and named <= ranks or not named and f.hosts and set(f.hosts) <= hosts)


def _target(roots: list[Finding], f: Finding) -> int:
    """The root a folded finding belongs to: one sharing a rank or a host, else the first."""
    for i, root in enumerate(roots):
        if set(f.ranks) & set(root.ranks) or set(f.hosts) & set(root.hosts):
            return i
    return 0


def _silent_clause(f: Finding) -> str:
    seen = f.evidence.get("last_sample_ns")
    when = (f" at {datetime.fromtimestamp(int(seen) / 1e9, tz=UTC).strftime('%H:%M:%S UTC')}"
            if isinstance(seen, int) and seen > 0 else "")
    return f"host {f.evidence.get('host', '?')} went silent{when}"


def _lost_peer(f: Finding) -> bool:
    """The first-failure finding when the first error is about a lost peer: a consequence by its own account."""
    return f.analyzer == Kind.CRASH and f.key.startswith("crash:first:") and bool(f.evidence.get("consequence_of_a_lost_peer"))


_CAUSE_ORDER: dict[str, int] = {Kind.SILENT_HOST: 0, Kind.CRASH: 1, Kind.HANG: 2}


def _cause_order(f: Finding) -> int:
    return _CAUSE_ORDER.get(f.analyzer, 9) + (1 if f.key.startswith("crash:first:") else 0)


def fold_failures(findings: list[Finding]) -> list[Finding]:
    roots = [f for f in findings if _is_root(f)]
    if not roots:
        return _fold_lost_peer(findings)
    root_ranks, behind = explained_ranks(roots)
    hosts = {h for f in roots for h in f.hosts}
    folded: dict[int, list[Finding]] = {}
    kept: list[Finding] = []
    for f in findings:
        if _is_root(f):
            continue
        if _explained(f, root_ranks | behind, hosts):
            folded.setdefault(_target(roots, f), []).append(f)
        else:
            kept.append(f)
    out: list[Finding] = []
    for i, root in enumerate(roots):
        extra = folded.get(i, [])
        if extra:
            silent = [_silent_clause(f) for f in extra if f.analyzer == Kind.SILENT_HOST and set(f.ranks) & set(root.ranks)]
            title = root.title if not silent else f"{root.title} ({'; '.join(silent)})"
            previous = list(root.evidence.get("folded", []))
            evidence = {**root.evidence, "folded": previous + [
                {"analyzer": f.analyzer, "id": f.id, "title": f.title} for f in extra[:32]]}
            root = replace(root, title=title, evidence=evidence)
        out.append(root)
    return [*out, *kept]


def _fold_lost_peer(findings: list[Finding]) -> list[Finding]:
    """Without a wait-for graph (logs, no dumps): a first failure that is about a lost peer folds into the
    finding that names the cause (a silent host, a rank that never joined the timed-out collective, a
    stack-hang suspect), when there is one."""
    lost = [f for f in findings if _lost_peer(f)]
    causes = sorted((f for f in findings if f.analyzer in FAILURE_ANALYZERS and f.severity == Severity.CRITICAL
                     and not _lost_peer(f) and set(f.ranks)), key=_cause_order)
    if not lost or not causes:
        return findings
    cause = causes[0]
    folded = [*cause.evidence.get("folded", []), *({"analyzer": f.analyzer, "id": f.id, "title": f.title} for f in lost)]
    merged = replace(cause, evidence={**cause.evidence, "folded": folded})
    return [merged if f is cause else f for f in findings if not _lost_peer(f)]
