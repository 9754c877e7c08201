"""The `nccl_config` analyzer: NCCL configuration and NCCL log problems, one finding per problem, from the Store
alone."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl import rules_busbw as busbw_rules
from perftracker.analyzers.nccl import rules_env as env_rules
from perftracker.analyzers.nccl import rules_ib as ib_rules
from perftracker.analyzers.nccl import rules_log as log_rules
from perftracker.analyzers.nccl import rules_net as net_rules
from perftracker.analyzers.nccl.context import NcclContext, context_view
from perftracker.analyzers.nccl.merge import one_per_subject, problems
from perftracker.analyzers.nccl.ras_roots import join_roots, ras_status
from perftracker.analyzers.nccl.rules_busbw import measured_context_view

RULES: tuple[Callable[[NcclContext], Iterable[Finding]], ...] = (
    net_rules.socket_fallback, net_rules.ib_disabled, net_rules.ib_devices, net_rules.socket_ifaces, net_rules.net_plugin,
    net_rules.gdr, net_rules.p2p,
    ib_rules.ib_hca, ib_rules.gid_index, ib_rules.tc_sl, ib_rules.timeout_retry, ib_rules.qps,
    env_rules.loose_integers, env_rules.echo_mismatch, env_rules.inconsistent, env_rules.profile_deviation,
    env_rules.debug_knobs,
    log_rules.warns, log_rules.completion_errors, log_rules.slow_init,
    env_rules.unverified,
    busbw_rules.bus_bandwidth, busbw_rules.wrong_results, ras_status,
)
# The problem classes about the network transport: judged only where the job uses one (`network_unused`).
NETWORK_FLAGS = frozenset({"gdr_disabled", "hca_problem", "gid_problem", "ib_tc", "ib_sl", "ib_timeout", "ib_retry",
                           "ib_qps", "net_plugin", "ib_completion_error"})


def _scoped(ctx: NcclContext, f: Finding) -> Finding:
    """A network finding of a job that uses no network transport is context (info), not a problem."""
    if f.severity > Severity.INFO and f.evidence.get("flag") in NETWORK_FLAGS and ctx.network_unused():
        return replace(f, severity=Severity.INFO,
                       title=f"Context only, this single-node job uses no network transport: {f.title}")
    return f


def check(ctx: NcclContext) -> list[Finding]:
    """Run every rule on a context; findings with the same id are reported once, and the findings about
    one subject (a variable, a link) become one finding with all their sources (merge.one_per_subject)."""
    first: dict[str, Finding] = {}
    for rule in RULES:
        for f in rule(ctx):
            first.setdefault(f.id, f)
    return one_per_subject([_scoped(ctx, f) for f in first.values()])


def nccl_active_view(analysis: Analysis) -> bool:
    """Is there NCCL to judge: a log fact or a configuration, of a job that uses NCCL (traces that name only
    another backend, gloo on CPU, ..., and nothing NCCL captured say it does not)?"""
    ctx = analysis.view(context_view)
    if ctx.empty:
        return False
    backends = [str(b) for b in analysis.store.ranks["backend"].dropna() if str(b)]
    return not backends or any("nccl" in b for b in backends) or ctx.nccl_evident


def nccl_findings_view(analysis: Analysis) -> list[Finding]:
    """Every rule's findings on the run's NCCL context, or [] when there is no NCCL to judge; RAS findings about
    a root of the wait-for graph are context of it (ras_roots.join_roots)."""
    if not analysis.view(nccl_active_view):
        return []
    return join_roots(analysis, check(analysis.view(measured_context_view)))


def analyze_nccl_config(analysis: Analysis) -> list[Finding]:
    """NCCL configuration and NCCL log problems."""
    return list(analysis.view(nccl_findings_view))


def flags(findings: list[Finding]) -> set[str]:
    """The problem classes a list of findings raises (the `flag` of each evidence, merged problems included)."""
    return {str(p["flag"]) for f in findings for p in problems(f) if p.get("flag")}
