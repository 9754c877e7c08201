"""The efficiency tables of the report: per (op, shape, dtype) figures against the roofline (`op_efficiency_view`,
with the time no model covers), and MFU per step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.devices import DTYPES, Device
from perftracker.analyzers.efficiency.instances import op_instances_view, unmodelled_view
from perftracker.analyzers.efficiency.roofline import ROOF_COLUMNS, device_names, device_of_ranks, roofline

GROUP = ["device", "op", "family", "shape", "dtype", "backward"]
EFFICIENCY_COLUMNS = [*GROUP, "count", "flops", "bytes", "gpu_ns", *ROOF_COLUMNS]
_UNKNOWN = Device("", (), np.nan)  # a device the table does not know: no name, no figures


def op_efficiency_view(analysis: Analysis) -> pd.DataFrame:
    """Achieved figures per (device, op, shape, dtype, direction), then the "no model" time (docs/internals/analyzers.md)."""
    inst = analysis.view(op_instances_view)
    devices = device_of_ranks(analysis)
    names = device_names(analysis)
    label = {rank: (d.name if d is not None else (names.get(rank) or "unknown device")) for rank, d in devices.items()}
    frames = []
    if len(inst):
        inst = inst.assign(device=inst["rank"].map(label).fillna("unknown device"))
        grouped = inst.groupby(GROUP, sort=False, dropna=False).agg(
            count=("gpu_ns", "size"), flops=("flops", "sum"), bytes=("bytes", "sum"), gpu_ns=("gpu_ns", "sum"))
        grouped = grouped.reset_index()
        by_name = {label[r]: d for r, d in devices.items()}
        for device_label, part in grouped.groupby("device", sort=False):
            frames.append(roofline(part, by_name.get(str(device_label))))
    rest = analysis.view(unmodelled_view)
    if len(rest):
        rest = rest.assign(device=rest["rank"].map(label).fillna("unknown device"))
        none = rest.groupby(["device", "op"], sort=False).agg(count=("kernels", "sum"), gpu_ns=("gpu_ns", "sum"))
        frames.append(none.reset_index().assign(family="no model", shape="", dtype="", backward=False,
                                                flops=np.nan, bytes=np.nan))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in EFFICIENCY_COLUMNS})
    out = pd.concat(frames, ignore_index=True).reindex(columns=EFFICIENCY_COLUMNS)
    out["gpu_ns"] = out["gpu_ns"].astype(np.int64)
    out["count"] = out["count"].astype(np.int64)
    return out.sort_values(["lost_ns", "gpu_ns"], ascending=False, na_position="last").reset_index(drop=True)


def device_peaks_view(analysis: Analysis) -> pd.DataFrame:
    """One row per distinct device of the run's ranks: its name in the trace, the table's entry and figures."""
    names = device_names(analysis)
    rows = [{"rank": rank, "trace_name": names.get(rank, ""), "known": device is not None, "device": d.name,
             "memory_tbps": d.memory_tbps, "source": d.source, **{f"peak_{x}": d.peak(x) for x in DTYPES}}
            for rank, device in device_of_ranks(analysis).items() for d in [device or _UNKNOWN]]
    frame = pd.DataFrame(rows, columns=["rank", "trace_name", "known", "device", "memory_tbps", "source",
                                        *(f"peak_{d}" for d in DTYPES)])
    return frame.drop_duplicates(["trace_name", "device"]).drop(columns="rank").reset_index(drop=True)
