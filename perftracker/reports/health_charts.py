"""Plotly figures of host health, one per host, each a plain function of the report tables: GPU clocks,
temperature, power and throttling; RDMA throughput, congestion and PFC pauses. Names pass through `charts.label`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perftracker.reports.charts import label

SHADE = {"thermal": "rgba(220,60,60,0.18)", "hw_slowdown": "rgba(230,140,20,0.18)",
         "power_brake": "rgba(120,60,200,0.18)"}
GPU_ROWS = ((1, "sm_clock_mhz"), (2, "temp_c"), (3, "power_w"))


def _time(ns: Any) -> pd.Series:
    return pd.to_datetime(pd.Series(ns).astype("int64"), unit="ns")


def _of(frame: pd.DataFrame, **match: Any) -> pd.DataFrame:
    if frame.empty:
        return frame
    mask = pd.Series(True, index=frame.index)
    for column, value in match.items():
        mask &= frame[column] == value
    return frame[mask]


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
