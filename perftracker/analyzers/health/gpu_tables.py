"""The report's GPU tables (of the first MAX_HOSTS hosts): clocks, temperature and power per GPU over time, and the
throttle periods."""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.health.gpu_health import gpu_series_view, throttle_view

MAX_HOSTS = 16
MAX_PERIODS = 50
SERIES_METRICS = ("sm_clock_mhz", "temp_c", "power_w")
SHADED_REASONS = ("thermal", "hw_slowdown", "power_brake")
SERIES_COLUMNS = ["host", "gpu", "ts_ns", *SERIES_METRICS]
THROTTLE_COLUMNS = ["host", "gpu", "reason", "start_ns", "end_ns"]


def _shown(analysis: Analysis) -> list[tuple[tuple[str, int], pd.DataFrame]]:
    wide = analysis.view(gpu_series_view)
    hosts = set(sorted({h for h, _ in wide})[:MAX_HOSTS])
    return [(key, w) for key, w in sorted(wide.items()) if key[0] in hosts]


def gpu_series_table(analysis: Analysis) -> pd.DataFrame:
    """host, gpu, ts_ns, sm_clock_mhz, temp_c, power_w of every sample of the GPUs shown."""
    frames = [pd.DataFrame({"host": host, "gpu": gpu, "ts_ns": w.index.to_numpy(dtype="int64"),
                            **{m: w[m].to_numpy(dtype=float) if m in w else float("nan") for m in SERIES_METRICS}})
              for (host, gpu), w in _shown(analysis)]
    if not frames:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SERIES_COLUMNS]


def gpu_throttle_table(analysis: Analysis) -> pd.DataFrame:
    """host, gpu, reason, start_ns, end_ns of the throttle periods of the GPUs shown."""
    throttle = analysis.view(throttle_view)
    rows = [(host, gpu, reason, start, end) for (host, gpu), _ in _shown(analysis) for reason in SHADED_REASONS
            for start, end in throttle[(host, gpu, reason)].periods[:MAX_PERIODS]]
    return pd.DataFrame(rows, columns=THROTTLE_COLUMNS)
