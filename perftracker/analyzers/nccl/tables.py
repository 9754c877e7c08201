"""The report's NCCL tables, from the NCCL context and the nccl_config findings: empty when there is no NCCL to
judge."""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.nccl.config import nccl_active_view, nccl_findings_view
from perftracker.analyzers.nccl.context import NcclFinding, context_view
from perftracker.analyzers.nccl.expected_bw import expect, topology_of
from perftracker.analyzers.nccl.rules_busbw import measured_context_view

MAX_VARIABLES = 24
MAX_WARNS = 30
SUMMARY_COLUMNS = ["profile", "warn_lines"]
CONFIG_COLUMNS = ["host", "rank", "variable", "value"]
FLAGGED_COLUMNS = ["variable", "severity"]
TRANSPORT_COLUMNS = ["host", "transport", "network", "nics", "intra"]
WARN_COLUMNS = ["host", "pid", "message", "count", "file", "line"]
BUSBW_COLUMNS = ["source", "what", "size_bytes", "busbw_gbs", "expected_gbs", "share", "bound_by", "where"]


def nccl_summary_table(analysis: Analysis) -> pd.DataFrame:
    """profile, warn_lines (one row, or none without NCCL)."""
    if not analysis.view(nccl_active_view):
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    ctx = analysis.view(context_view)
    profile = ctx.profile.get("name")
    return pd.DataFrame([{"profile": str(profile) if profile else "", "warn_lines": sum(ctx.warn_lines.values())}],
                        columns=SUMMARY_COLUMNS)


def nccl_config_table(analysis: Analysis) -> pd.DataFrame:
    """host, rank, variable, value of the NCCL variables captured per host and rank."""
    if not analysis.view(nccl_active_view):
        return pd.DataFrame(columns=CONFIG_COLUMNS)
    ctx = analysis.view(context_view)
    variables = sorted(k for k in ctx.settings if k.startswith("NCCL_"))[:MAX_VARIABLES]
    first: dict[tuple[str, int, str], str] = {}
    for var in variables:
        for s in ctx.settings[var]:
            first.setdefault((s.host, s.rank, var), s.value)
    return pd.DataFrame([(h, r, v, value) for (h, r, v), value in first.items()], columns=CONFIG_COLUMNS)


def nccl_flagged_table(analysis: Analysis) -> pd.DataFrame:
    """variable, severity (info | warning | critical): the worst finding about each variable."""
    worst: dict[str, Severity] = {}
    for f in analysis.view(nccl_findings_view):
        for var in f.variables if isinstance(f, NcclFinding) else ():
            if var not in worst or f.severity > worst[var]:
                worst[var] = f.severity
    return pd.DataFrame([(v, s.label) for v, s in sorted(worst.items())], columns=FLAGGED_COLUMNS)


def nccl_transports_table(analysis: Analysis) -> pd.DataFrame:
    """Per host: transport, network, nics, intra (sorted, comma-separated)."""
    if not analysis.view(nccl_active_view):
        return pd.DataFrame(columns=TRANSPORT_COLUMNS)
    per_host: dict[str, dict[str, set[str]]] = {}
    for p in analysis.view(context_view).procs:
        entry = per_host.setdefault(p.host, {"transport": set(), "nics": set(), "network": set(), "intra": set()})
        entry["transport"].add(p.transport)
        entry["network"].update(p.values("network"))
        for n in p.jsons("nic"):
            entry["nics"].add(f"{n.get('hca')}:{n.get('port')}/{n.get('link_layer')}" + ("/SHARP" if n.get("sharp") else ""))
        for via in p.values("via"):
            if via.startswith(("P2P/", "SHM/")):
                entry["intra"].add(via.split()[0])
    rows = [{"host": h, **{k: ", ".join(sorted(e[k])) for k in TRANSPORT_COLUMNS[1:]}} for h, e in sorted(per_host.items())]
    return pd.DataFrame(rows, columns=TRANSPORT_COLUMNS)


def nccl_warns_table(analysis: Analysis) -> pd.DataFrame:
    """host, pid, message, count, file, line of the first WARN lines of the NCCL logs."""
    if not analysis.view(nccl_active_view):
        return pd.DataFrame(columns=WARN_COLUMNS)
    rows = [(p.host, p.pid, value[:300], count, p.file, line)
            for p in analysis.view(context_view).procs for value, line, count in p.facts.get("warn", [])]
    return pd.DataFrame(rows[:MAX_WARNS], columns=WARN_COLUMNS)


def nccl_busbw_table(analysis: Analysis) -> pd.DataFrame:
    """source, what, size_bytes, busbw_gbs, expected_gbs, share, bound_by, where of each measured bus bandwidth."""
    if not analysis.view(nccl_active_view):
        return pd.DataFrame(columns=BUSBW_COLUMNS)
    ctx = analysis.view(measured_context_view)
    exp = expect(topology_of(ctx, tuple(sorted({g for m in ctx.measured for g in m.gpus}))))
    expected = exp.busbw_gbs if exp is not None else float("nan")
    rows = [(m.source, m.what, m.size_bytes, round(m.busbw_gbs, 2), round(expected, 1),
             round(m.busbw_gbs / expected, 3) if exp is not None and expected > 0 else float("nan"),
             exp.bound_by if exp is not None else "", m.where) for m in ctx.measured]
    return pd.DataFrame(rows, columns=BUSBW_COLUMNS)
