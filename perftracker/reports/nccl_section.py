"""The report's NCCL section: configuration per host/rank (deviations highlighted), transports and
NICs in use, and a WARN / error summary.

Promise: returns None when the Store has no NCCL facts and no configuration; every string that came
from a log, an environment or a finding is escaped with `html.escape`.
"""

from __future__ import annotations

from html import escape

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, build_context, job_without_nccl
from perftracker.reports.sections import ReportSection
from perftracker.store import Store

_MAX_COLUMNS = 24


def _flagged_vars(findings: list[Finding]) -> dict[str, Severity]:
    """Variable name -> worst severity of the NCCL findings that mention it."""
    out: dict[str, Severity] = {}
    for f in findings:
        if f.analyzer != "nccl_config":
            continue
        text = f.title + " " + " ".join(str(x) for x in f.evidence.get("env", []) or [])
        for word in text.replace("=", " ").replace("(", " ").split():
            if word.startswith("NCCL_") and (word not in out or f.severity > out[word]):
                out[word] = f.severity
    return out


def _config_table(ctx: NcclContext, flagged: dict[str, Severity]) -> str:
    variables = sorted(k for k in ctx.settings if k.startswith("NCCL_"))[:_MAX_COLUMNS]
    if not variables:
        return "<p>No NCCL variables were captured.</p>"
    rows: dict[tuple[str, int], dict[str, str]] = {}
    for var in variables:
        for s in ctx.settings[var]:
            cell = rows.setdefault((s.host, s.rank), {})
            cell.setdefault(var, s.value)
    head = "".join(f"<th>{escape(v)}</th>" for v in variables)
    body = []
    for (host, rank), values in sorted(rows.items()):
        cells = []
        for var in variables:
            value = values.get(var)
            sev = flagged.get(var)
            cls = f' class="nccl-{sev.label}"' if sev is not None and value is not None else ""
            cells.append(f"<td{cls}>{escape(value) if value is not None else '&ndash;'}</td>")
        label = f"{escape(host or '(env file)')} / {rank if rank >= 0 else '?'}"
        body.append(f"<tr><th>{label}</th>{''.join(cells)}</tr>")
    return (f'<table class="nccl-config"><thead><tr><th>host / rank</th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _transport_table(ctx: NcclContext) -> str:
    if not ctx.procs:
        return ""
    per_host: dict[str, dict[str, set[str]]] = {}
    for p in ctx.procs:
        entry = per_host.setdefault(p.host, {"transport": set(), "nics": set(), "net": set(), "intra": set()})
        entry["transport"].add(p.transport)
        entry["net"].update(p.values("network"))
        for n in p.jsons("nic"):
            entry["nics"].add(f"{n.get('hca')}:{n.get('port')}/{n.get('link_layer')}" + ("/SHARP" if n.get("sharp") else ""))
        for via in p.values("via"):
            if via.startswith(("P2P/", "SHM/")):
                entry["intra"].add(via.split()[0])
    rows = "".join(
        f"<tr><td>{escape(h)}</td><td>{escape(', '.join(sorted(e['transport'])))}</td>"
        f"<td>{escape(', '.join(sorted(e['net'])))}</td><td>{escape(', '.join(sorted(e['nics'])))}</td>"
        f"<td>{escape(', '.join(sorted(e['intra'])))}</td></tr>" for h, e in sorted(per_host.items()))
    return ("<h3>Transports and NICs</h3><table class=\"nccl-transport\"><thead><tr><th>host</th><th>transport</th>"
            "<th>network</th><th>NICs</th><th>intra-node</th></tr></thead>" f"<tbody>{rows}</tbody></table>")


def _warn_summary(ctx: NcclContext, findings: list[Finding]) -> str:
    total = sum(ctx.warn_lines.values())
    items = []
    for p in ctx.procs:
        for value, line, count in p.facts.get("warn", []):
            items.append(f"<li><code>{escape(p.host)}:{p.pid}</code> {escape(value[:300])}"
                         f"{f' (x{count})' if count > 1 else ''} <small>{escape(p.file)}:{line}</small></li>")
    errors = [f for f in findings if f.evidence.get("flag") == "ib_completion_error"]
    err_items = "".join(f"<li>{escape(f.title)}</li>" for f in errors)
    html = f"<h3>WARN and errors</h3><p>{total} WARN line(s).</p>"
    if items:
        html += f"<ul>{''.join(items[:30])}</ul>"
    if err_items:
        html += f"<p>Failing links:</p><ul>{err_items}</ul>"
    return html


def nccl_section(store: Store, findings: list[Finding]) -> ReportSection | None:
    """The NCCL section, or None when there is no NCCL log and no configuration."""
    ctx = build_context(store)
    if ctx.empty or job_without_nccl(store, ctx):
        return None
    flagged = _flagged_vars(findings)
    profile = ctx.profile.get("name")
    html = (
        "<style>.nccl-critical{background:#f8d0d0}.nccl-warning{background:#fbeec0}.nccl-info{background:#e0eefa}"
        "table.nccl-config td,table.nccl-config th{padding:2px 6px;font-size:12px}</style>"
        f"<h3>Configuration per host / rank{f' (profile {escape(str(profile))})' if profile else ''}</h3>"
        + _config_table(ctx, flagged) + _transport_table(ctx) + _warn_summary(ctx, findings)
    )
    return ReportSection(key="nccl", title="NCCL", html=html)
