"""Plotly figures of the "Efficiency" section: the roofline (ops as points, the device's roofs as lines).

Plain functions of the report tables (no diagnosis here). Op names and shapes come from the trace: every label and
hover text goes through `charts.label`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from perftracker.reports.charts import figure, label

FAMILY_COLORS = {"gemm": "#4C78A8", "attention": "#B279A2", "conv": "#72B7B2", "norm": "#EECA3B",
                 "elementwise": "#9D755D", "reduction": "#54A24B"}
MAX_POINTS = 400


def roofline_chart(ops: pd.DataFrame, peaks: pd.DataFrame) -> dict[str, Any] | None:
    """Achieved TFLOPS against arithmetic intensity (log-log) for the ops with FLOPs, one point per (op, shape, dtype)
    sized by GPU time, with each dtype's compute roof and the memory roof of the (first known) device."""
    pts = ops[(ops["flops"] > 0) & (ops["gpu_ns"] > 0)] if len(ops) else ops
    if pts.empty:
        return None
    pts = pts.sort_values("gpu_ns", ascending=False).head(MAX_POINTS)
    fig = go.Figure()
    size = 6 + 24 * np.sqrt(pts["gpu_ns"].to_numpy(np.float64) / float(pts["gpu_ns"].max()))
    for family in dict.fromkeys(pts["family"].astype(str)):
        mine = pts["family"].astype(str).to_numpy() == family
        part = pts[mine]
        hover = [label(f"{op} {shape} {dtype}: {t:.1f} TFLOPS, {ns / 1e6:.3f} ms, {c} call(s)")
                 for op, shape, dtype, t, ns, c in zip(part["op"], part["shape"], part["dtype"], part["tflops"],
                                                        part["gpu_ns"], part["count"])]
        fig.add_scatter(x=part["intensity"].round(3), y=part["tflops"].round(3), mode="markers", name=label(family),
                        marker=dict(size=size[mine].round(1), color=FAMILY_COLORS.get(family, "#999999"),
                                    opacity=0.7), hovertext=hover, hoverinfo="text")
    known = peaks[peaks["known"].astype(bool)] if len(peaks) else peaks
    if len(known):
        device = known.iloc[0]
        bw = float(device["memory_tbps"])
        lo = max(float(pts["intensity"].min()) / 4, 1e-3)
        for dtype in dict.fromkeys(pts["dtype"].astype(str)):
            peak = float(device.get(f"peak_{dtype}", math.nan))
            if not peak > 0:
                continue
            ridge = peak / bw
            hi = max(float(pts["intensity"].max()) * 4, ridge * 4)
            fig.add_scatter(x=[lo, ridge, hi], y=[lo * bw, peak, peak], mode="lines",
                            name=label(f"{device['device']} {dtype} roof ({peak:g} TFLOPS, {bw:g} TB/s)"),
                            line=dict(dash="dash", width=1.5), hoverinfo="name")
    return figure(fig, 420, title="Roofline: achieved TFLOPS per op shape against FLOPs per byte",
                  xaxis=dict(type="log", title="arithmetic intensity (FLOPs per byte)"),
                  yaxis=dict(type="log", title="achieved TFLOPS"))
