"""Achieved figures against the device's roofline: per op instance group, TFLOPS, TB/s, intensity, bound, % of bound."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.devices import Device, device_table

ROOF_COLUMNS = ["tflops", "tbps", "intensity", "peak_tflops", "peak_tbps", "roof_ns", "bound", "pct_of_peak", "lost_ns",
                "tf32"]


def device_names(analysis: Analysis) -> dict[int, str]:
    """The device name each rank's trace gives (the first window's non-empty one), '' when none."""
    ranks = analysis.store.ranks
    names: dict[int, str] = {}
    for rank, name in zip(ranks["rank"].tolist(), ranks["device_name"].astype(str).tolist()):
        if name and name != "nan" and not names.get(int(rank)):
            names[int(rank)] = name
        names.setdefault(int(rank), "")
    return names


def device_of_ranks(analysis: Analysis) -> dict[int, Device | None]:
    """Each rank's device from the table (the user's files of `AnalysisOptions.device_files`, then the shipped)."""
    table = device_table(tuple(analysis.options.device_files))
    return {rank: table.match(name) for rank, name in device_names(analysis).items()}


def roofline(frame: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    """`frame` with the ROOF_COLUMNS added (docs/internals/analyzers.md)."""
    out = frame.copy()
    ns = out["gpu_ns"].to_numpy(np.float64)
    flops, moved = out["flops"].to_numpy(np.float64), out["bytes"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tflops = np.where(ns > 0, flops / ns / 1e3, np.nan)
        tbps = np.where(ns > 0, moved / ns / 1e3, np.nan)
        intensity = np.where(moved > 0, flops / moved, np.nan)
    dtypes = out["dtype"].astype(str).to_numpy()
    peak = np.full(len(out), np.nan)
    for dtype in set(dtypes.tolist()):
        rows = dtypes == dtype
        peak[rows] = device.peak(dtype) if device is not None else np.nan
        if dtype == "fp32" and device is not None:  # TF32 where an FP32 op outran the FP32 units
            faster = rows & (np.nan_to_num(tflops) > device.peak("fp32")) & ~np.isnan([device.peak("tf32")])[0]
            peak[faster] = device.peak("tf32")
    bw = device.memory_tbps if device is not None else math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        compute_ns = np.where(flops > 0, flops / (peak * 1e3), 0.0)
        memory_ns = moved / (bw * 1e3)
        roof_ns = np.maximum(np.nan_to_num(compute_ns, nan=np.nan), memory_ns)
        is_compute = (flops > 0) & (compute_ns >= memory_ns)
        pct = np.where(is_compute, 100.0 * tflops / peak, 100.0 * tbps / bw)
    cached = ~is_compute & (np.nan_to_num(tbps) > bw)  # more bytes per second than the memory delivers
    pct = np.where(cached, np.nan, pct)
    known = device is not None
    out["tflops"], out["tbps"], out["intensity"] = tflops, tbps, intensity
    out["peak_tflops"], out["peak_tbps"] = peak, bw
    out["roof_ns"] = roof_ns if known else np.nan
    out["bound"] = np.where(is_compute, "compute", np.where(cached, "cache", "memory")) if known else ""
    out["pct_of_peak"] = pct if known else np.nan
    out["lost_ns"] = np.where(cached, 0.0, np.maximum(ns - roof_ns, 0.0)) if known else np.nan
    fp32_peak = device.peak("fp32") if device is not None else math.nan
    out["tf32"] = (out["dtype"].astype(str) == "fp32").to_numpy() & (np.nan_to_num(tflops) > fp32_peak)
    return out
