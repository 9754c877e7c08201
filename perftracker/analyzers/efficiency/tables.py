"""The efficiency tables of the report: per (op, shape, dtype) figures against the roofline (`op_efficiency_view`,
with the time no model covers), and model FLOPs utilization per step and rank from the modelled ops of the step
(`step_mfu_view`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.devices import (
    DTYPES,
    ROOF_COLUMNS,
    Device,
    device_names,
    device_of_ranks,
    roofline,
)
from perftracker.analyzers.efficiency.instances import op_instances_view, unmodelled_view
from perftracker.analyzers.traces.gpu_time import gpu_work_view

GROUP = ["device", "op", "family", "shape", "dtype", "backward"]
EFFICIENCY_COLUMNS = [*GROUP, "count", "flops", "bytes", "gpu_ns", *ROOF_COLUMNS]
_UNKNOWN = Device("", (), np.nan)  # a device the table does not know: no name, no figures
MATRIX_FAMILIES = ("gemm", "attention", "conv")
MFU_COLUMNS = ["rank", "window", "step", "model_flops", "step_ns", "dtype", "peak_tflops", "tflops", "mfu", "device"]


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


def _periods(analysis: Analysis) -> pd.DataFrame:
    """rank, window, step, step_ns: the profiler steps, and a step -1 row for each window without any."""
    steps = analysis.store.steps
    prof = steps[steps["source"] == "profiler"][["rank", "window", "step", "dur_ns"]].rename(columns={"dur_ns": "step_ns"})
    work = analysis.view(gpu_work_view)
    spans = work.groupby(["rank", "window"], sort=True, observed=True).agg(
        lo=("start_ns", "min"), hi=("end_ns", "max")).reset_index().reindex(columns=["rank", "window", "lo", "hi"])
    have = set(zip(prof["rank"].tolist(), prof["window"].tolist()))
    spans = spans.loc[np.array([(r, w) not in have for r, w in zip(spans["rank"].tolist(), spans["window"].tolist())],
                               dtype=bool)]
    windows = pd.DataFrame({"rank": spans["rank"], "window": spans["window"], "step": -1,
                            "step_ns": (spans["hi"] - spans["lo"]).astype(np.int64)})
    return pd.concat([prof, windows], ignore_index=True).astype({"rank": np.int64, "window": np.int64,
                                                                  "step": np.int64, "step_ns": np.int64})


def step_mfu_view(analysis: Analysis) -> pd.DataFrame:
    """MFU per (rank, window, step): see docs/internals/analyzers.md."""
    inst = analysis.view(op_instances_view)
    inst = inst[inst["family"].isin(MATRIX_FAMILIES)]
    periods = _periods(analysis) if len(inst) else pd.DataFrame()
    if periods.empty:  # no steps, or no op shapes at all (record_shapes off): no MFU, rather than a false 0%
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in MFU_COLUMNS})
    by_dtype = inst.groupby(["rank", "window", "step", "dtype"], sort=False)["flops"].sum().reset_index()
    by_dtype = by_dtype.astype({"rank": np.int64, "window": np.int64, "step": np.int64})
    total = by_dtype.groupby(["rank", "window", "step"])["flops"].sum().rename("model_flops")
    top = by_dtype.sort_values("flops", ascending=False).drop_duplicates(["rank", "window", "step"])
    out = periods.merge(total.reset_index(), how="left", on=["rank", "window", "step"])
    out = out.merge(top[["rank", "window", "step", "dtype"]], how="left", on=["rank", "window", "step"])
    out["model_flops"] = out["model_flops"].fillna(0.0)
    out["dtype"] = out["dtype"].fillna("")
    devices = device_of_ranks(analysis)
    fp32 = inst[inst["dtype"] == "fp32"].groupby(["rank", "op", "shape"])[["flops", "gpu_ns"]].sum()
    fp32_fastest = (fp32["flops"] / fp32["gpu_ns"].clip(lower=1) / 1e3).groupby(level="rank").max()  # per shape, as
    # the roofline judges it: one instance's microsecond-rounded time is no evidence
    peak = []
    for rank, dtype in zip(out["rank"].tolist(), out["dtype"].tolist()):
        device = devices.get(int(rank))
        value = np.nan if device is None else device.peak(dtype)
        if device is not None and dtype == "fp32" and float(fp32_fastest.get(rank, 0.0)) > device.peak("fp32"):
            value = device.peak("tf32")  # an FP32 op ran faster than FP32 units can: TF32 was on
        peak.append(value)
    out["peak_tflops"] = np.array(peak, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["tflops"] = np.where(out["step_ns"] > 0, out["model_flops"] / out["step_ns"] / 1e3, np.nan)
        out["mfu"] = out["tflops"] / out["peak_tflops"]
    out["device"] = [d.name if (d := devices.get(int(r))) is not None else "" for r in out["rank"].tolist()]
    return out[MFU_COLUMNS].sort_values(["rank", "window", "step"]).reset_index(drop=True)
