"""The finding passes: the one place that relates one analyzer's findings to another's, in one ordered list.

`FINDING_PASSES` is the ordered list of passes a full analysis runs over the analyzers' findings
(`registry.run_analyzers` runs the analyzers and nothing else).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.fold import fold_failures
from perftracker.analyzers.findings import Finding, Kind, Role, Severity, failure_finding, rank_findings
from perftracker.analyzers.layout.views import parallel_layout_view, with_positions
from perftracker.analyzers.online.waited_fold import fold_into_waited_rank
from perftracker.analyzers.registry import Analyzer, run_analyzers
from perftracker.analyzers.rootcause import link_findings
from perftracker.analyzers.stepgraph.replay_costs import with_replay_costs
from perftracker.evidence import as_evidence
from perftracker.evidence.common import PassEvidence

PassFn = Callable[[Analysis, list[Finding]], list[Finding]]


@dataclass(frozen=True)
class FindingPass:
    """One pass over every analyzer's findings: its name (as the docs and `apply_passes(only=...)` say it)."""

    name: str
    fn: PassFn


def _replay_costs(analysis: Analysis, findings: list[Finding]) -> list[Finding]:
    try:
        return with_replay_costs(analysis, findings)
    except Exception as exc:  # the analyzers' own costs stand
        return [*findings, failure_finding(Kind.REPLAY, f"What-if replay failed: {type(exc).__name__}: {exc}",
                                           "This is a perftracker bug; the costs are the analyzers' own.",
                                           key="crash:replay")]


def _roles(analysis: Analysis, findings: list[Finding]) -> list[Finding]:
    """A finding whose root-cause chain (`links`) names a finding that explains it is that finding's
    consequence; the explaining one is a root."""
    explained: set[str] = set()
    causes: set[str] = set()
    for f in findings:
        root = as_evidence(f.evidence, PassEvidence).get("root_cause")
        chain = root.get("chain", []) if isinstance(root, dict) else []  # a plugin's own root_cause: no chain
        ids = {str(c.get("id")) for c in chain if isinstance(c, dict) and c.get("explains")}
        if ids:
            explained.add(f.id)
            causes |= ids
    return [f.with_role(Role.CONSEQUENCE) if f.id in explained
            else f.with_role(Role.ROOT) if f.id in causes and f.severity >= Severity.WARNING else f
            for f in findings]


REPLAY_COSTS = "replay costs"
FINDING_PASSES: tuple[FindingPass, ...] = (
    FindingPass("positions", lambda analysis, findings: with_positions(findings,
                                                                       analysis.view(parallel_layout_view))),
    FindingPass(REPLAY_COSTS, _replay_costs),
    FindingPass("links", link_findings),
    FindingPass("failure folds", lambda analysis, findings: fold_failures(findings)),
    FindingPass("waited-rank fold", lambda analysis, findings: fold_into_waited_rank(findings)),
    FindingPass("roles", _roles),
    FindingPass("ranking", lambda analysis, findings: rank_findings(findings)),
)


def apply_passes(analysis: Analysis, findings: list[Finding], only: Collection[str] | None = None) -> list[Finding]:
    """Every pass of `FINDING_PASSES` (or those named in `only`), once, in the list's order."""
    for finding_pass in FINDING_PASSES:
        if only is None or finding_pass.name in only:
            findings = finding_pass.fn(analysis, findings)
    return findings


def costed_findings(analysis: Analysis, only: list[str] | None = None,
                    extra: tuple[Analyzer, ...] = ()) -> list[Finding]:
    """The analyzers' findings (`registry.run_analyzers`) with each named rank's place and their replay costs,
    nothing else joined."""
    return apply_passes(analysis, run_analyzers(analysis, only, extra), ("positions", REPLAY_COSTS))
