"""One side of a comparison: the step times, op totals, settings and findings of one run.

`RunSide` holds what `diff.compare_runs` needs of a run, already analyzed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.stragglers.degradation import job_series


@dataclass(frozen=True)
class RunSide:
    """What one run contributes to a comparison."""

    label: str
    steps: pd.DataFrame  # rank, window, step, start_ns, dur_ns, source
    op_totals: pd.DataFrame  # rank, kind, name, total_ns, count, steps
    settings: pd.DataFrame  # key, value, ranks, source
    findings: tuple[Finding, ...]

    def job_steps_s(self) -> np.ndarray:
        """The job's step time per step (median across ranks), in seconds, in step order (step files
        preferred, as for the step analyzers)."""
        if self.steps.empty:
            return np.array([], dtype=float)
        return job_series(self.steps).to_numpy(dtype=float)

    def ms_per_step(self) -> pd.DataFrame:
        """Per (rank, kind, name): milliseconds per profiled step (ranks without profiled steps left out)."""
        ops = self.op_totals
        if ops.empty:
            return pd.DataFrame(columns=["rank", "kind", "name", "ms"])
        ops = ops[ops["steps"] > 0]
        out = ops[["rank", "kind", "name"]].copy()
        out["ms"] = ops["total_ns"] / 1e6 / ops["steps"]
        return out.reset_index(drop=True)

    def setting_values(self) -> dict[str, frozenset[str]]:
        """key -> the set of values seen (over ranks and sources)."""
        if self.settings.empty:
            return {}
        return {str(k): frozenset(str(v) for v in g["value"]) for k, g in self.settings.groupby("key")}


def side_from_tables(label: str, tables: Mapping[str, pd.DataFrame], findings: list[Finding]) -> RunSide:
    """A RunSide from report tables (an analysis's or a saved folder's); missing tables are empty."""
    steps, ops, settings = (tables.get(name, pd.DataFrame()) for name in ("steps", "op_totals", "settings"))
    return RunSide(label, steps, ops, settings, tuple(findings))
