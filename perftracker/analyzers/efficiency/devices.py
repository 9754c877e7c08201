"""The device table: peak TFLOPS by dtype and peak memory bandwidth of the GPU a trace ran on (`device_of_ranks`), and
achieved figures against that device's roofline (`roofline`: per op instance group, TFLOPS, TB/s, intensity, bound,
% of bound)."""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.bounded_toml import TomlRefused, read_toml
from perftracker.errors import InputError

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
MAX_FIGURE = 1e7  # TFLOPS or TB/s beyond this is a typo, not a device
_HINT = "write it like perftracker/data/devices.toml: [[device]] tables with a name, patterns, memory_tbps and peaks"


@dataclass(frozen=True)
class Device:
    """One device: its patterns, dense peak TFLOPS by dtype, memory bandwidth in TB/s, and where they come from."""

    name: str
    patterns: tuple[str, ...]
    memory_tbps: float
    peaks: dict[str, float] = field(default_factory=dict)
    source: str = ""
    note: str = ""

    def peak(self, dtype: str) -> float:
        """Dense peak TFLOPS for `dtype` ("bf16", ...), NaN when the device has no figure for it."""
        return self.peaks.get(dtype, math.nan)


class DeviceTable:
    """The devices in the order they are matched (the user's first), each name pattern compiled once."""

    def __init__(self, devices: tuple[Device, ...]) -> None:
        self.devices = devices
        self._compiled = [(re.compile(p, re.IGNORECASE), d) for d in devices for p in d.patterns]

    def match(self, name: str) -> Device | None:
        """The first device with a pattern found in `name`, None when none matches (or the name is empty)."""
        if not name:
            return None
        return next((device for regex, device in self._compiled if regex.search(name)), None)


def builtin_devices() -> tuple[Device, ...]:
    """The devices shipped in perftracker/data/devices.toml."""
    ref = resources.files("perftracker") / "data" / "devices.toml"
    return _devices(tomllib.loads(ref.read_text(encoding="utf-8")), "perftracker/data/devices.toml")


@functools.lru_cache(maxsize=8)
def device_table(files: tuple[Path, ...] = ()) -> DeviceTable:
    """The user's devices (each file's, in order), then the shipped ones."""
    user = [device for path in files for device in _read_user_file(Path(path))]
    return DeviceTable((*user, *builtin_devices()))


def _read_user_file(path: Path) -> tuple[Device, ...]:
    try:
        document = read_toml(path, cap=1 << 20)  # bounded: size, nesting and dotted keys checked before parsing
    except (OSError, InputError) as exc:
        raise InputError(f"cannot read the device file ({getattr(exc, 'message', exc)})", str(path),
                         "check the path given to --devices or PERFTRACKER_DEVICES") from None
    except TomlRefused as exc:
        raise InputError(f"the device file is {exc}", str(path), _HINT) from None
    return _devices(document, str(path))


def _figure(table: dict[str, Any], key: str, where: str, i: int) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < MAX_FIGURE:
        raise InputError(f"device {i}: {key} = {value!r} is not a positive number", where, _HINT)
    return float(value)


def _devices(document: dict[str, Any], where: str) -> tuple[Device, ...]:
    tables = document.get("device")
    if not isinstance(tables, list) or not tables:
        raise InputError("no [[device]] tables in the device file", where, _HINT)
    found = []
    for i, table in enumerate(tables, start=1):
        name = table.get("name") if isinstance(table, dict) else None
        patterns = table.get("patterns") if isinstance(table, dict) else None
        if not isinstance(table, dict) or not isinstance(name, str) or not name or not isinstance(patterns, list) \
                or not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise InputError(f"device {i} needs a name (text) and patterns (a list of regular expressions)", where,
                             _HINT)
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"the pattern {pattern!r} is not a valid regular expression ({exc})", where,
                                 "fix the pattern (Python re syntax)") from None
        memory = _figure(table, "memory_tbps", where, i)
        if memory is None:
            raise InputError(f"device {i} ({name}) needs memory_tbps", where, _HINT)
        peaks = {dtype: value for dtype in DTYPES if (value := _figure(table, dtype, where, i)) is not None}
        found.append(Device(name, tuple(patterns), memory, peaks, str(table.get("source", "")),
                            str(table.get("note", ""))))
    return tuple(found)


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
