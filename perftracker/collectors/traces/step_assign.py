"""Give every event of one rank the step it belongs to: CPU events by time, GPU events through their launch.

Promise: `assign_steps(steps, stream, ts, corr, ...)` returns each event's step (-1: none), a GPU event taking
its launch's step; with `unlaunched_in_no_step`, a GPU event launched before the window belongs to no step.
The Kineto and Nsight Systems paths both assign steps here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd


def assign_steps(steps: pd.DataFrame, stream: npt.NDArray[np.int64], ts: npt.NDArray[np.int64],
                 corr: npt.NDArray[np.int64], unlaunched_in_no_step: bool) -> npt.NDArray[np.int64]:
    """Step of each event (see the module docstring); `steps` sorted by start, one row per step."""
    result = np.full(len(ts), -1, dtype=np.int64)
    if steps.empty:
        return result
    starts = steps["start_ns"].to_numpy()
    ends = starts + steps["dur_ns"].to_numpy()
    numbers = steps["step"].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.clip(pos, 0, None)])
    result[inside] = numbers[pos[inside]]
    gpu = stream >= 0
    launch = (~gpu) & (corr >= 0)
    if launch.any() and gpu.any():
        launch_step = pd.Series(result[launch], index=corr[launch])
        launch_step = launch_step[~launch_step.index.duplicated()]
        mapped = pd.Series(corr[gpu]).map(launch_step).to_numpy()
        by_time = result[gpu]
        if unlaunched_in_no_step:  # its launch preceded the trace
            by_time = np.where(pd.isna(mapped) & (corr[gpu] > 0), -1, by_time)
        result[gpu] = np.where(pd.isna(mapped), by_time, mapped).astype(np.int64)
    return result
