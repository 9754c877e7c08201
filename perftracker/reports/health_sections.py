"""Report sections for host health: RDMA throughput / congestion and GPU clocks / temperature / power.

Promise: `rdma_section` and `gpu_section` return None when the Store has no such samples. Figures
are plotly dicts, one per host: RDMA transmit / receive Gb/s per port over time and congestion
rates, and for RoCE ports with `ethtool` counters the share of time paused by PFC per priority
(received / sent), with PFC columns in the port table and the rdma_pfc findings listed; GPU SM clock, temperature and power per GPU over time with throttle periods (thermal, HW
slowdown, power brake) shaded, with the gpu_health / gpu_links (NVLink, PCIe replay) findings
listed. Under each straggler finding's root-cause chain (from `rootcause.link_findings`) the GPU
section (or the RDMA section when there are no GPU samples) lists the causes. Every string from inputs or findings is escaped with `html.escape`.
"""

from __future__ import annotations

from html import escape
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.health.gpu_health import gpu_wide, periods, throttle_mask
from perftracker.analyzers.health.rdma import CNP_NAMES, port_series
from perftracker.analyzers.health.rdma_pfc import pfc_series, port_views
from perftracker.reports.sections import ReportSection
from perftracker.store import Store

_MAX_HOSTS = 16
_SHADE = {"thermal": "rgba(220,60,60,0.18)", "hw_slowdown": "rgba(230,140,20,0.18)",
          "power_brake": "rgba(120,60,200,0.18)"}


def _time(ns: Any) -> pd.DatetimeIndex:
    return pd.to_datetime(pd.Series(ns).astype("int64"), unit="ns")  # type: ignore[return-value]


def root_cause_html(findings: list[Finding]) -> str:
    """The root-cause chain of each straggler finding, as a list."""
    items = []
    for f in findings:
        root = f.evidence.get("root_cause")
        if not isinstance(root, dict):
            continue
        chain = "".join(f"<li><b>{escape(str(c.get('severity', '')))}</b> {escape(str(c.get('title', '')))}"
                        f"{' (explains the delay)' if c.get('explains') else ''}</li>" for c in root.get("chain", []))
        items.append(f"<li><b>{escape(f.title)}</b><br>{escape(str(root.get('summary', '')))}"
                     f"{f'<ol>{chain}</ol>' if chain else ''}</li>")
    return f"<h3>Root causes of stragglers</h3><ul>{''.join(items)}</ul>" if items else ""


def _paused(stats: dict[str, dict[str, Any]]) -> str:
    """"20% (prio 3)": the most paused priority of one direction, or the pause frame rate without durations."""
    moved = {p: s for p, s in stats.items() if s["moved"]}
    if not moved:
        return "0"
    prio, s = max(moved.items(), key=lambda kv: (kv[1]["paused_share"] or 0.0, kv[1]["pause_frames_per_s"]))
    amount = f"{100 * s['paused_share']:.1f}%" if s["paused_share"] is not None else f"{s['pause_frames_per_s']:,.0f}/s"
    return f"{amount} (prio {escape(prio)})"


def _rdma_table(series: pd.DataFrame, pfc: dict[tuple[str, str, str], Any]) -> str:
    rows = []
    keys = sorted({(str(h), str(d), str(p)) for h, d, p in zip(series.get("host", []), series.get("device", []),
                                                               series.get("port", []))} | set(pfc))
    for host, dev, port in keys:
        g = series[(series["host"] == host) & (series["device"] == dev) & (series["port"] == port)] \
            if len(series) else series
        cells = ["", "", "", "", ""]
        if len(g):
            cnp = sum(float(g[n].sum()) for n in CNP_NAMES if n in g) / float(g["dt_s"].sum())
            state = g["state_id"].iloc[-1] if "state_id" in g else float("nan")
            rate = g["rate_gbps"].iloc[-1] if "rate_gbps" in g else float("nan")
            cells = ["ACTIVE" if state == 4 else escape(str(state)), f"{rate:g}", f"{g['tx_gbps'].mean():.2f}",
                     f"{g['rx_gbps'].mean():.2f}", f"{cnp:,.0f}"]
        if pfc:
            v = pfc.get((host, dev, port))
            cells += [_paused(v.pauses["rx"]), _paused(v.pauses["tx"])] if v else ["", ""]
        rows.append(f"<tr><td>{escape(host)}</td><td>{escape(dev)}/{escape(port)}</td>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    extra = "<th>PFC rx paused</th><th>PFC tx paused</th>" if pfc else ""
    return ("<table class=\"health\"><thead><tr><th>host</th><th>port</th><th>state</th><th>rate Gb/s</th>"
            f"<th>tx Gb/s</th><th>rx Gb/s</th><th>CNP+ECN /s</th>{extra}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _pfc_traces(fig: go.Figure, p: pd.DataFrame, dev: str, port: str, row: int) -> None:
    t = _time(p["t1_ns"])
    for col in p.columns:
        if str(col).endswith("_pause_duration") and float(p[col].sum()) > 0:
            fig.add_trace(go.Scatter(x=t, y=100 * p[col] / 1e6 / p["dt_s"], mode="lines",
                                     name=f"{dev}/{port} {str(col)[:-len('_duration')]} % of time"), row=row, col=1)


def _pfc_html(findings: list[Finding], has_pfc: bool) -> str:
    listed = "".join(f"<li>{escape(f.severity.label)}: {escape(f.title)}</li>"
                     for f in findings if f.analyzer == "rdma_pfc")
    if listed:
        return f"<h3>RoCE flow control (PFC, drops)</h3><ul>{listed}</ul>"
    return "<p>RoCE flow control: no PFC pauses, pause storms or drops above the thresholds.</p>" if has_pfc else ""


def rdma_section(store: Store, findings: list[Finding]) -> ReportSection | None:
    """Per-host RDMA throughput, congestion and PFC pauses over time, or None without RDMA samples."""
    series, pfc = port_series(store), pfc_series(store)
    if series.empty and pfc.empty:
        return None
    views = {(v.host, v.dev, v.port): v for v in port_views(store, pfc)}
    figures: list[dict[str, Any]] = []
    hosts = sorted({str(h) for h in series.get("host", [])} | {str(h) for h in pfc.get("host", [])})[:_MAX_HOSTS]
    for host in hosts:
        g = series[series["host"] == host] if len(series) else series
        mine = pfc[pfc["host"] == host] if len(pfc) else pfc
        titles = ["throughput (Gb/s)", "congestion (per s)"] + (["PFC paused (% of time)"] if len(mine) else [])
        fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles)
        for (dev, port), p in mine.groupby(["device", "port"]) if len(mine) else []:
            _pfc_traces(fig, p, str(dev), str(port), 3)
        for (dev, port), p in g.groupby(["device", "port"]) if len(g) else []:
            t = _time(p["t1_ns"])
            fig.add_trace(go.Scatter(x=t, y=p["tx_gbps"], name=f"{dev}/{port} tx", mode="lines"), row=1, col=1)
            fig.add_trace(go.Scatter(x=t, y=p["rx_gbps"], name=f"{dev}/{port} rx", mode="lines",
                                     line={"dash": "dot"}), row=1, col=1)
            for name in CNP_NAMES + ("port_xmit_wait",):
                if name in p and float(p[name].sum()) > 0:
                    fig.add_trace(go.Scatter(x=t, y=p[name] / p["dt_s"], name=f"{dev}/{port} {name}",
                                             mode="lines"), row=2, col=1)
        fig.update_layout(title=f"RDMA on host {host}", height=240 * len(titles), margin={"t": 60, "b": 30})
        figures.append(fig.to_plotly_json())
    has_gpu = bool(gpu_wide(store))
    html = _rdma_table(series, views) + _pfc_html(findings, bool(views)) + ("" if has_gpu else root_cause_html(findings))
    return ReportSection(key="rdma", title="RDMA ports", html=html, figures=figures)


def gpu_section(store: Store, findings: list[Finding]) -> ReportSection | None:
    """Per-host GPU clocks, temperature and power over time with throttle periods shaded."""
    wide = gpu_wide(store)
    if not wide:
        return None
    figures: list[dict[str, Any]] = []
    hosts = sorted({h for h, _ in wide})[:_MAX_HOSTS]
    for host in hosts:
        fig = make_subplots(rows=3, cols=1, shared_xaxes=True,
                            subplot_titles=("SM clock (MHz)", "temperature (C)", "power (W)"))
        for (h, gpu), w in sorted(wide.items()):
            if h != host:
                continue
            t = _time(w.index)
            for row, metric in ((1, "sm_clock_mhz"), (2, "temp_c"), (3, "power_w")):
                if metric in w:
                    fig.add_trace(go.Scatter(x=t, y=w[metric], name=f"GPU {gpu} {metric}", mode="lines",
                                             legendgroup=f"gpu{gpu}"), row=row, col=1)
            for reason, color in _SHADE.items():
                for start, end in periods(throttle_mask(w, reason))[:50]:
                    fig.add_vrect(x0=pd.Timestamp(start, unit="ns"), x1=pd.Timestamp(end, unit="ns"),
                                  fillcolor=color, line_width=0, row="all", col=1,
                                  annotation_text=f"GPU {gpu} {reason}", annotation_position="top left")
        fig.update_layout(title=f"GPUs on host {host}", height=640, margin={"t": 60, "b": 30})
        figures.append(fig.to_plotly_json())
    gpu_findings = [f for f in findings if f.analyzer in ("gpu_health", "gpu_links")]
    listed = "".join(f"<li>{escape(f.severity.label)}: {escape(f.title)}</li>" for f in gpu_findings[:30])
    html = root_cause_html(findings) + (f"<h3>GPU findings</h3><ul>{listed}</ul>" if listed else
                                        "<p>No GPU health problems in the samples.</p>")
    return ReportSection(key="gpu", title="GPU health", html=html, figures=figures)
