"""Report sections for the job's network and hosts: NCCL (configuration per host/rank, transports and NICs, a
WARN / error summary, bus bandwidth), the NCCL Inspector tables, RDMA throughput / congestion and GPU clocks /
temperature / power. Each returns None without its inputs; the health sections list their findings and, under
each straggler's root-cause chain, the causes; their figures (`gpu_figures`, `rdma_figures`) are one per host.
"""


from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perftracker.analyzers.findings import Finding, Kind
from perftracker.evidence import as_evidence
from perftracker.evidence.network import NcclConfigEvidence
from perftracker.reports.charts import label
from perftracker.reports.sections import Column, Section, Tables, grid, listed, root_causes, table

ACTIVE = 4  # sysfs port state "4: ACTIVE"
MAX_PORT_ROWS = 64  # the rest of the ports are in tables/rdma_ports.parquet, named under the table
MAX_GPU_FINDINGS = 30
SHADE = {"thermal": "rgba(220,60,60,0.18)", "hw_slowdown": "rgba(230,140,20,0.18)",
         "power_brake": "rgba(120,60,200,0.18)"}
GPU_ROWS = ((1, "sm_clock_mhz"), (2, "temp_c"), (3, "power_w"))
MAX_ROWS = 64  # rows of each table on the page; the rest is in tables/<view>.parquet, named under the table
TRANSPORT_COLUMNS = {c: (name, str) for c, name in (("host", "host"), ("transport", "transport"), ("network", "network"),
                                                    ("nics", "NICs"), ("intra", "intra-node"))}
WARN_COLUMNS = ("host", "pid", "message", "count", "file", "line")
BUSBW_COLUMNS = {"source": "source", "what": "measured", "size_bytes": "bytes", "busbw_gbs": "busbw GB/s",
                 "expected_gbs": "expected GB/s", "share": "share", "bound_by": "bounded by"}
BANDWIDTH_COLUMNS = {"comm_name": "communicator", "comm_size": "ranks", "op": "op", "bytes": "bytes",
                     "collectives": "collectives", "busbw_median_gbs": "busbw median GB/s",
                     "busbw_p10_gbs": "busbw p10 GB/s", "transfer_median_ms": "transfer median ms"}
LATENESS_COLUMNS = {"comm_name": "communicator", "rank": "rank", "host": "host", "collectives": "collectives",
                    "median_lateness_ms": "median lateness ms", "median_exec_ms": "median kernel ms"}


def _paused(priority: str, share: float, frames_per_s: float) -> str:
    """"20.0% (prio 3)": the most paused priority, or its pause frame rate without durations; "0" when none moved."""
    if not priority:
        return "0"
    amount = f"{100 * share:.1f}%" if not math.isnan(share) else f"{frames_per_s:,.0f}/s"
    return f"{amount} (prio {priority})"


def _port_row(r: Any, with_pfc: bool) -> list[str]:
    cells = [str(r.host), f"{r.device}/{r.port}"]
    if r.sampled:
        cells += ["ACTIVE" if r.state_id == ACTIVE else str(r.state_id), f"{r.rate_gbps:g}", f"{r.tx_gbps:.2f}",
                  f"{r.rx_gbps:.2f}", f"{r.cnp_per_s:,.0f}"]
    else:
        cells += ["", "", "", "", ""]
    if with_pfc:
        cells += ([_paused(r.pfc_rx_priority, r.pfc_rx_paused_share, r.pfc_rx_frames_per_s),
                   _paused(r.pfc_tx_priority, r.pfc_tx_paused_share, r.pfc_tx_frames_per_s)] if r.pfc else ["", ""])
    return cells


def rdma_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """Per-host RDMA throughput, congestion and PFC pauses over time, or None without RDMA samples."""
    ports = table(tables, "rdma_ports")
    if ports.empty:
        return None
    with_pfc = bool(ports["pfc"].any())
    head = ["host", "port", "state", "rate Gb/s", "tx Gb/s", "rx Gb/s", "CNP+ECN /s"]
    head += ["PFC rx paused", "PFC tx paused"] if with_pfc else []
    data = {
        "ports": {"head": head, "rows": [_port_row(r, with_pfc) for r in ports.head(MAX_PORT_ROWS).itertuples(index=False)],
                  "more": max(0, len(ports) - MAX_PORT_ROWS), "source": "rdma_ports"},
        "pfc": {"counters": with_pfc, "findings": listed(findings, ("rdma_pfc",))},
        "root_causes": root_causes(findings) if table(tables, "gpu_series").empty else [],
    }
    figures = rdma_figures(ports, table(tables, "rdma_throughput"), table(tables, "rdma_congestion"),
                           table(tables, "pfc_paused"))
    return Section("rdma", "RDMA ports", "section_rdma.html.j2", data, figures)


def gpu_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """Per-host GPU clocks, temperature and power over time with throttle periods shaded."""
    series = table(tables, "gpu_series")
    if series.empty:
        return None
    data = {"root_causes": root_causes(findings),
            "findings": listed(findings, ("gpu_health", "gpu_links"), MAX_GPU_FINDINGS)}
    return Section("gpu", "GPU health", "section_gpu.html.j2", data,
                   gpu_figures(series, table(tables, "gpu_throttle")))


def _time(ns: Any) -> pd.Series:
    return pd.to_datetime(pd.Series(ns).astype("int64"), unit="ns")


def _of(frame: pd.DataFrame, **match: Any) -> pd.DataFrame:
    return frame if frame.empty else frame[(frame[list(match)] == pd.Series(match)).all(axis=1)]


def gpu_figures(series: pd.DataFrame, throttle: pd.DataFrame) -> list[dict[str, Any]]:
    """One figure per host of `series` (host, gpu, ts_ns and the metrics), throttle periods shaded."""
    figures: list[dict[str, Any]] = []
    if series.empty:
        return figures
    for host, mine in series.groupby("host", sort=True):
        fig = make_subplots(rows=3, cols=1, shared_xaxes=True,
                            subplot_titles=("SM clock (MHz)", "temperature (C)", "power (W)"))
        for gpu, w in mine.groupby("gpu", sort=True):
            t = _time(w["ts_ns"])
            for row, metric in GPU_ROWS:
                if w[metric].notna().any():
                    fig.add_trace(go.Scatter(x=t, y=w[metric], name=label(f"GPU {gpu} {metric}"), mode="lines",
                                             legendgroup=label(f"gpu{gpu}")), row=row, col=1)
            periods = _of(throttle, host=host, gpu=gpu)
            for reason, color in SHADE.items() if not periods.empty else ():
                for start, end in zip(*(_of(periods, reason=reason)[c].tolist() for c in ("start_ns", "end_ns"))):
                    fig.add_vrect(x0=pd.Timestamp(start, unit="ns"), x1=pd.Timestamp(end, unit="ns"),
                                  fillcolor=color, line_width=0, row="all", col=1,
                                  annotation_text=label(f"GPU {gpu} {reason}"), annotation_position="top left")
        fig.update_layout(title=f"GPUs on host {label(host)}", height=640, margin={"t": 60, "b": 30})
        figures.append(fig.to_plotly_json())
    return figures


def rdma_figures(ports: pd.DataFrame, throughput: pd.DataFrame, congestion: pd.DataFrame,
                 paused: pd.DataFrame) -> list[dict[str, Any]]:
    """One figure per host `shown` in `ports`: throughput, congestion and (with PFC counters) paused share."""
    figures: list[dict[str, Any]] = []
    if ports.empty:
        return figures
    for host in sorted({str(h) for h in ports.loc[ports["shown"].astype(bool), "host"]}):
        has_pfc = bool(_of(ports, host=host)["pfc"].any()) and not _of(paused, host=host).empty
        rates = _of(congestion, host=host)
        has_congestion = not rates.empty  # a panel with no data is left out, not drawn as an empty box
        titles = ["throughput (Gb/s)"] + (["congestion (per s)"] if has_congestion else []) \
            + (["PFC paused (% of time)"] if has_pfc else [])
        fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles)
        for (dev, port), p in _of(paused, host=host).groupby(["device", "port"], sort=True) if has_pfc else []:
            for counter, q in p.groupby("counter", sort=False):
                fig.add_trace(go.Scatter(x=_time(q["t1_ns"]), y=q["paused_pct"], mode="lines",
                                         name=label(f"{dev}/{port} {counter} % of time")), row=len(titles), col=1)
        for (dev, port), p in _of(throughput, host=host).groupby(["device", "port"], sort=True):
            name = label(f"{dev}/{port}")
            t = _time(p["t1_ns"])
            fig.add_trace(go.Scatter(x=t, y=p["tx_gbps"], name=f"{name} tx", mode="lines"), row=1, col=1)
            fig.add_trace(go.Scatter(x=t, y=p["rx_gbps"], name=f"{name} rx", mode="lines",
                                     line={"dash": "dot"}), row=1, col=1)
            for counter, q in _of(rates, device=dev, port=port).groupby("counter", sort=False):
                fig.add_trace(go.Scatter(x=_time(q["t1_ns"]), y=q["per_s"], name=f"{name} {label(counter)}",
                                         mode="lines"), row=2, col=1)
        fig.update_layout(title=f"RDMA on host {label(host)}", height=240 * len(titles), margin={"t": 60, "b": 30})
        fig.update_yaxes(rangemode="tozero")  # a flat 8 Gb/s line must not look like swings between 8 and 8.0001
        figures.append(fig.to_plotly_json())
    return figures


def _config(config: pd.DataFrame, flagged: pd.DataFrame) -> dict[str, Any]:
    """Variables (sorted) and one row per (host, rank): its label and per variable value and highlight."""
    if config.empty:
        return {"variables": [], "rows": [], "more": 0}
    severity = dict(zip(flagged.get("variable", []), flagged.get("severity", [])))
    variables = sorted({str(v) for v in config["variable"]})
    values: dict[tuple[str, int], dict[str, str]] = {}
    for host, rank, var, value in zip(config["host"], config["rank"], config["variable"], config["value"]):
        values.setdefault((str(host), int(rank)), {})[str(var)] = str(value)
    rows = []
    for (host, rank), mine in sorted(values.items()):
        cells = [{"value": mine.get(v), "severity": severity.get(v) if v in mine else None} for v in variables]
        rows.append({"label": f"{host or '(env file)'} / {rank if rank >= 0 else '?'}", "cells": cells})
    return {"variables": variables, "rows": rows[:MAX_ROWS], "more": max(0, len(rows) - MAX_ROWS)}


def _grid(tables: Tables, name: str, columns: Mapping[str, Column]) -> dict[str, Any]:
    """The view `name` as a `grid` (its rows: none without the view)."""
    frame = table(tables, name)
    return grid(frame, columns, source=name) if not frame.empty else {"rows": []}


def nccl_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """The NCCL section, or None when there is no NCCL log and no configuration."""
    summary = table(tables, "nccl_summary")
    if summary.empty:
        return None
    warns = table(tables, "nccl_warns")
    data = {
        "profile": str(summary["profile"].iloc[0]),
        "config": _config(table(tables, "nccl_config"), table(tables, "nccl_flagged")),
        "transports": _grid(tables, "nccl_transports", TRANSPORT_COLUMNS),
        "warn_lines": int(summary["warn_lines"].iloc[0]),
        "warns": [{"where": f"{host}:{pid}", "message": str(message), "count": int(count), "at": f"{file}:{line}"}
                  for host, pid, message, count, file, line in
                  zip(*(warns[c].head(MAX_ROWS).tolist() for c in WARN_COLUMNS))] if not warns.empty else [],
        "warns_more": max(0, len(warns) - MAX_ROWS),
        "failing_links": [f.title for f in findings if f.analyzer == Kind.NCCL_CONFIG
                          and as_evidence(f.evidence, NcclConfigEvidence).get("flag") == "ib_completion_error"],
        "busbw": _grid(tables, "nccl_busbw", BUSBW_COLUMNS),
    }
    return Section("nccl", "NCCL", "section_nccl.html.j2", data)


def inspector_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """The NCCL Inspector tables, or None when the run has no Inspector records."""
    data = {"bandwidth": _grid(tables, "inspector_bandwidth", BANDWIDTH_COLUMNS),
            "lateness": _grid(tables, "inspector_lateness", LATENESS_COLUMNS)}
    if not data["bandwidth"]["rows"] and not data["lateness"]["rows"]:
        return None
    return Section("inspector", "NCCL collectives (Inspector)", "section_inspector.html.j2", data)
