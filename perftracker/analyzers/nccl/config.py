"""The `nccl_config` analyzer: NCCL configuration and NCCL log problems, one finding per problem.

Promise: reads only the Store (tables `nccl` and `config`, `store.run_info.sysfs` from
collectors.sysfs.read_sysfs and `store.run_info.nccl_profile` from collectors.profiles.load_profile);
returns [] when there is no NCCL log fact and no configuration captured. One finding per problem:
the rules' findings about one variable or link are merged (`merge.py`). Every finding's evidence
has a `flag` (socket_fallback, hca_problem, gid_problem, bad_socket_iface, gdr_disabled,
p2p_disabled, ib_completion_error, nccl_warn, slow_init, ib_tc, ib_sl, ib_timeout, ib_retry, ib_qps,
net_plugin, loose_int, echo_mismatch, inconsistent_env, profile, forced_tuning, debug, unverified, ...).
Config findings carry no per-step cost (they rank by severity).
"""

from __future__ import annotations

from collections.abc import Callable

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding
from perftracker.analyzers.nccl import rules_env as env_rules
from perftracker.analyzers.nccl import rules_ib as ib_rules
from perftracker.analyzers.nccl import rules_log as log_rules
from perftracker.analyzers.nccl import rules_net as net_rules
from perftracker.analyzers.nccl import rules_verify as verify_rules
from perftracker.analyzers.nccl.context import NcclContext, build_context, job_without_nccl
from perftracker.analyzers.nccl.merge import one_per_subject, problems

RULES: tuple[Callable[[NcclContext], list[Finding]], ...] = (
    net_rules.socket_fallback, net_rules.ib_disabled, net_rules.ib_devices, net_rules.socket_ifaces, net_rules.net_plugin,
    net_rules.gdr, net_rules.p2p,
    ib_rules.ib_hca, ib_rules.gid_index, ib_rules.tc_sl, ib_rules.timeout_retry, ib_rules.qps,
    env_rules.loose_integers, env_rules.echo_mismatch, env_rules.inconsistent, env_rules.profile_deviation,
    env_rules.debug_knobs,
    log_rules.warns, log_rules.completion_errors, log_rules.slow_init,
    verify_rules.unverified,
)


def check(ctx: NcclContext) -> list[Finding]:
    """Run every rule on a context; findings with the same id are reported once, and the findings about
    one subject (a variable, a link) become one finding with all their sources (merge.one_per_subject)."""
    seen: set[str] = set()
    out: list[Finding] = []
    for rule in RULES:
        for f in rule(ctx):
            if f.id not in seen:
                seen.add(f.id)
                out.append(f)
    return one_per_subject(out)


def analyze_nccl_config(analysis: Analysis) -> list[Finding]:
    """NCCL configuration and NCCL log problems."""
    store = analysis.store
    ctx = build_context(store)
    if ctx.empty or job_without_nccl(store, ctx):
        return []
    return check(ctx)


def flags(findings: list[Finding]) -> set[str]:
    """The problem classes a list of findings raises (the `flag` of each evidence, merged problems included)."""
    return {str(p["flag"]) for f in findings for p in problems(f) if p.get("flag")}
