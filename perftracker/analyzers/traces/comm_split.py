"""The GPU work with each communication kernel's wait for late ranks cut off as its own klass, "wait".

`transfer_work(work, waits)`: `work` with every communication kernel found waiting split into its wait and its
transfer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.wait_transfer import kernel_waits_view
from perftracker.analyzers.traces.gpu_time import KLASSES, gpu_work_view

_KEYS = ["rank", "window", "start_ns", "dur_ns"]


def transfer_work(work: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """`work` with the waiting part of each matched communication kernel as a "wait" row (docs/internals/analyzers.md)."""
    if work.empty or waits.empty:
        return work
    comm = work["klass"] == "comm"
    keyed = work.loc[comm, _KEYS].astype(np.int64).reset_index()
    joined = keyed.merge(waits[[*_KEYS, "wait_ns"]].astype(np.int64).drop_duplicates(_KEYS), on=_KEYS, how="inner")
    if joined.empty:
        return work
    rows = joined["index"].to_numpy()
    wait = joined["wait_ns"].to_numpy(np.int64)
    dur = joined["dur_ns"].to_numpy(np.int64)
    wait = np.minimum(wait, dur)
    waiting = work.loc[rows].copy()
    waiting["dur_ns"] = wait
    waiting["end_ns"] = waiting["start_ns"] + wait
    waiting["klass"] = pd.Categorical(np.full(len(rows), "wait"), categories=KLASSES)
    out = work.copy()
    out.loc[rows, "start_ns"] = out.loc[rows, "start_ns"].to_numpy(np.int64) + wait
    out.loc[rows, "dur_ns"] = dur - wait
    whole = out.loc[rows, "dur_ns"].to_numpy(np.int64) > 0
    out = out.drop(index=rows[~whole])  # a kernel that only waited leaves no transfer row
    joined_work: pd.DataFrame = pd.concat([out, waiting], ignore_index=True)
    return joined_work.sort_values(["rank", "window", "start_ns"], kind="stable", ignore_index=True)


def transfer_work_view(analysis: Analysis) -> pd.DataFrame:
    """The run's GPU work with waiting told apart from transfer (docs/internals/analyzers.md)."""
    return transfer_work(analysis.view(gpu_work_view), analysis.view(kernel_waits_view))
