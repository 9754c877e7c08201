"""The periods a rank's GPU costs are measured over, so that no cost is a larger share than the time it is of.

`cost_periods_view(analysis)` has one row per rank window and period.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.analyzers.traces.comm_split import transfer_work_view
from perftracker.analyzers.traces.cpu_ops import top_level
from perftracker.analyzers.traces.gpu_time import as_int, gpu_work
from perftracker.store import Store

COLUMNS = ["rank", "window", "period", "start_ns", "end_ns", "basis", "clock", "marker"]
_OPTIMIZER_STEP = "Optimizer.step#"


@dataclass(frozen=True)
class Basis:
    """How a rank's periods were chosen, in words for findings."""

    basis: str  # steps | iterations | window
    clock: str  # cpu | gpu | mixed
    marker: str = ""

    @property
    def unit(self) -> str:
        """'step', 'iteration' or 'window': what one period is called."""
        return {"steps": "step", "iterations": "iteration"}.get(self.basis, "window")

    @property
    def per(self) -> str:
        """'per step' / 'per iteration' / 'over the profiled window'."""
        return "over the profiled window" if self.basis == "window" else f"per {self.unit}"

    @property
    def of(self) -> str:
        """'of the step' / 'of the iteration' / 'of the window'."""
        return f"of the {self.unit}"

    def describe(self) -> str:
        """One sentence for a finding's evidence: what the costs were measured over."""
        if self.basis == "steps":
            gpu = "each step runs from the first GPU work its launches queued to the next step's"
            clock = {"gpu": f"on the GPU's clock (the GPU runs behind the CPU: {gpu})",
                     "mixed": f"on the CPU's step time, or the GPU's in the profiling windows where the GPU ran "
                              f"behind the CPU ({gpu})"}.get(self.clock, "on the CPU's step time")
            return f"profiler steps (ProfilerStep#N), {clock}"
        if self.basis == "iterations":
            return (f"iterations inferred from the repeating annotation '{self.marker}' (no ProfilerStep "
                    "markers): the time between its starts")
        return "the whole profiled window (no ProfilerStep markers and no repeating annotation to infer steps from)"


def cost_periods(store: Store, work: pd.DataFrame, drop_last_step: bool = False) -> pd.DataFrame:
    """The periods of every rank window that has GPU `work` (docs/internals/analyzers.md)."""
    if work.empty:
        return pd.DataFrame(columns=COLUMNS)
    steps = store.steps[store.steps["source"] == "profiler"]
    frames = []
    for (rank, window), group in work.groupby(["rank", "window"], sort=True, observed=True):
        r, w = as_int(rank), as_int(window)
        mine = steps[(steps["rank"] == r) & (steps["window"] == w)].sort_values("start_ns")
        if drop_last_step and len(mine) >= 2:
            mine = mine.iloc[:-1]
        if not mine.empty:
            frame = _step_periods(mine, group)
        else:
            inferred = _iteration_periods(_cpu_markers(store, r, w))
            frame = inferred if inferred is not None else pd.DataFrame({  # the whole window: one period
                "period": [0], "start_ns": [int(group["start_ns"].min())], "end_ns": [int(group["end_ns"].max())],
                "basis": "window", "clock": "gpu", "marker": ""})
        frame.insert(0, "window", w)
        frame.insert(0, "rank", r)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)[COLUMNS]


def _step_periods(steps: pd.DataFrame, work: pd.DataFrame) -> pd.DataFrame:
    """The steps on the CPU's clock, or on the GPU's when the GPU runs behind (see `gpu_step_bounds`)."""
    cpu_start = steps["start_ns"].to_numpy(np.int64)
    cpu_end = cpu_start + steps["dur_ns"].to_numpy(np.int64)
    numbers = steps["step"].to_numpy(np.int64)
    gpu_start, gpu_end = gpu_step_bounds(numbers, cpu_start, cpu_end, work)
    behind = (gpu_end[-1] - gpu_start[0]) > (cpu_end[-1] - cpu_start[0])
    start, end = (gpu_start, gpu_end) if behind else (cpu_start, cpu_end)
    return pd.DataFrame({"period": numbers, "start_ns": start, "end_ns": end, "basis": "steps",
                         "clock": "gpu" if behind else "cpu", "marker": ""})


def gpu_step_bounds(numbers: npt.NDArray[np.int64], cpu_start: npt.NDArray[np.int64],
                    cpu_end: npt.NDArray[np.int64], work: pd.DataFrame) -> tuple[npt.NDArray[np.int64],
                                                                                  npt.NDArray[np.int64]]:
    """The steps on the GPU's clock (docs/internals/analyzers.md): from the first GPU work each step's launches
    queued to the next one's (the last to the end of its own work); they tile the GPU's timeline."""
    launched = work[work["step"] >= 0]
    span = launched.groupby("step").agg(lo=("start_ns", "min"), hi=("end_ns", "max"))
    first = span["lo"].reindex(numbers).to_numpy(dtype=float)
    bounds = np.maximum.accumulate(np.where(np.isnan(first), cpu_start, first).astype(np.int64))
    last_end = span["hi"].reindex(numbers[-1:]).to_numpy(dtype=float)[0]
    tail = int(cpu_end[-1]) if np.isnan(last_end) else int(last_end)
    end = np.concatenate([bounds[1:], [max(tail, int(bounds[-1]))]]).astype(np.int64)
    return bounds, end


def _cpu_markers(store: Store, rank: int, window: int) -> pd.DataFrame:
    """Top-level user annotations (not nested in another event of their thread) of one rank window."""
    ev = store.rank_events(rank)
    cpu = ev[(ev["rank"] == rank) & (ev["window"] == window) & (ev["stream"] < 0)
             & ev["kind"].isin(["annotation", "cpu_op", "collective_cpu"])]
    if cpu.empty:
        return cpu
    top = top_level(cpu).to_numpy()
    marks = cpu[top & (cpu["kind"] == "annotation").to_numpy()]
    return marks[~marks["name"].astype(str).str.startswith("ProfilerStep#")]


def _iteration_periods(marks: pd.DataFrame) -> pd.DataFrame | None:
    """Periods between the starts of the steadiest repeating annotation, or None when none repeats."""
    if marks.empty:
        return None
    candidates = []
    for name, group in marks.groupby(marks["name"].astype(str)):
        starts = np.sort(group["start_ns"].to_numpy(np.int64))
        if len(starts) < threshold_int("periods.min_iterations"):
            continue
        pace = np.diff(starts)
        if pace.min() <= 0 or pace.max() > threshold("periods.max_pace_ratio") * pace.min():
            continue
        candidates.append((not str(name).startswith(_OPTIMIZER_STEP), len(starts), str(name), starts))
    if not candidates:
        return None
    _, _, name, starts = min(candidates, key=lambda c: (c[0], c[1], c[2]))
    return pd.DataFrame({"period": np.arange(len(starts) - 1), "start_ns": starts[:-1], "end_ns": starts[1:],
                         "basis": "iterations", "clock": "cpu", "marker": name})


def cost_work_view(analysis: Analysis) -> pd.DataFrame:
    """The GPU work the costs count: perftracker's definition (a communication kernel's wait for late ranks
    cut off as klass "wait", `comm_split`), or HTA's under `--hta-compat`."""
    if analysis.options.hta_compat:
        return gpu_work(analysis.store, hta_compat=True)
    return analysis.view(transfer_work_view)


def cost_periods_view(analysis: Analysis) -> pd.DataFrame:
    """The periods of every rank window (docs/internals/analyzers.md), under the analysis's definitions."""
    return cost_periods(analysis.store, analysis.view(cost_work_view), drop_last_step=analysis.options.hta_compat)


def basis_of(periods: pd.DataFrame) -> dict[int, Basis]:
    """Per rank, how its periods were chosen (a rank's windows share one basis unless they differ: then the
    first window's, with clock 'mixed' when steps used both clocks)."""
    found: dict[int, Basis] = {}
    for rank, group in periods.groupby("rank", sort=True):
        clocks = set(group["clock"])
        clock = "mixed" if len(clocks) > 1 else next(iter(clocks))
        first = group.iloc[0]
        found[as_int(rank)] = Basis(str(first["basis"]), clock, str(first["marker"]))
    return found
