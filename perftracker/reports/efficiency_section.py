"""The report's "Efficiency" section: MFU per rank and step, the roofline, the least efficient ops.

`efficiency_section(tables, findings)` is None without `op_efficiency` rows or GPU time; otherwise it lays out
`step_mfu`, `op_efficiency` and `device_peaks` (at most TOP_ROWS rows per table) and the roofline chart
(`roofline_chart`: ops as points, the device's roofs as lines; labels through `charts.label`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding
from perftracker.reports.charts import figure, label
from perftracker.reports.evidence import measured, number
from perftracker.reports.sections import Column, Section, Tables, grid, table

TEMPLATE = "section_efficiency.html.j2"
TOP_ROWS = 20
FAMILY_COLORS = {"gemm": "#4C78A8", "attention": "#B279A2", "conv": "#72B7B2", "norm": "#EECA3B",
                 "elementwise": "#9D755D", "reduction": "#54A24B"}
MAX_POINTS = 400


def _ms(ns: Any) -> str:
    return measured(ns, 1e6)


# source column -> its label, or (label, how a value is shown)
MFU_COLUMNS: dict[str, Column] = {
    "rank": "rank", "step": ("step", lambda s: "window" if int(s) < 0 else str(int(s))),
    "device": ("device", lambda d: str(d) or "unknown"), "dtype": "dtype",
    "model_flops": ("model TFLOP", lambda f: measured(f, 1e12)), "step_ns": ("step ms", _ms),
    "tflops": ("TFLOPS", measured), "mfu": ("MFU %", lambda m: measured(100.0 * m))}
OP_COLUMNS: dict[str, Column] = {
    "op": "op", "shape": "shape", "dtype": "dtype", "count": "count", "gpu_ns": ("GPU ms", _ms),
    "tflops": ("TFLOPS", measured), "tbps": ("TB/s", measured), "bound": ("bound", lambda b: str(b) or "-"),
    "pct_of_peak": ("% of roof", measured), "lost_ns": ("ms lost vs roof", _ms)}
UNMODELLED_COLUMNS: dict[str, Column] = {"op": "op (launching the kernels)", "count": "kernels",
                                         "gpu_ns": ("GPU ms", _ms)}


def efficiency_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """MFU, the roofline and the least efficient ops (see the module docstring)."""
    ops = table(tables, "op_efficiency")
    if ops.empty or not (ops["family"] != "no model").any():
        return None
    peaks = table(tables, "device_peaks")
    unknown = sorted(set(peaks.loc[~peaks["known"].astype(bool), "trace_name"].astype(str))) if len(peaks) else []
    modelled, none = ops[ops["family"] != "no model"], ops[ops["family"] == "no model"]
    modelled_ns, other_ns = float(modelled["gpu_ns"].sum()), float(none["gpu_ns"].sum())
    if modelled_ns + other_ns <= 0:
        return None  # no GPU time (a CPU-only run): rates against a GPU's roofs would be a table of dashes
    data = {
        "mfu": grid(table(tables, "step_mfu"), MFU_COLUMNS, TOP_ROWS, "step_mfu"),
        "ops": grid(modelled.assign(tflops=modelled["tflops"].where(modelled["flops"] > 0)), OP_COLUMNS, TOP_ROWS,
                    "op_efficiency"),
        "unmodelled": grid(none.sort_values("gpu_ns", ascending=False), UNMODELLED_COLUMNS, 10, "op_efficiency"),
        "unknown": [name or "no device name in the trace" for name in unknown],
        "devices": [f"{r['device']}: {r['source']}" for _, r in peaks[peaks["known"].astype(bool)].iterrows()]
        if len(peaks) else [],
        "coverage": number(100.0 * modelled_ns / (modelled_ns + other_ns)),
    }
    roof = roofline_chart(modelled, peaks)
    return Section(key="efficiency", title="Efficiency", template=TEMPLATE, data=data, figures=[roof] if roof else [])


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
