"""What the efficiency findings share (`basis_view`): the instances that count, their roofline figures, and a cost
per step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.instances import op_instances_view
from perftracker.analyzers.efficiency.mfu import step_mfu_view
from perftracker.analyzers.efficiency.roofline import device_of_ranks, roofline
from perftracker.analyzers.findings import Cost


@dataclass(frozen=True)
class Basis:
    instances: pd.DataFrame  # modelled instances in periods, with the roofline columns
    periods: int
    mean_period_ns: float
    gpu_ns: float  # GPU time of all modelled instances in periods

    def cost(self, saved_ns: float) -> Cost:
        if self.periods <= 0 or not saved_ns > 0:
            return Cost()
        per = saved_ns / self.periods
        share = per / self.mean_period_ns if self.mean_period_ns > 0 else 0.0
        return Cost(seconds_per_step=per / 1e9, share_of_step=min(share, 1.0))


def ranks_of(frame: pd.DataFrame) -> tuple[int, ...]:
    """The ranks of `frame`'s rows (at most 64), for a finding's `ranks`."""
    return tuple(sorted({int(r) for r in frame["rank"].tolist()}))[:64] if "rank" in frame.columns else ()


def basis_view(analysis: Analysis) -> Basis:
    """The `Basis` of this analysis, computed once."""
    mfu = analysis.view(step_mfu_view)
    inst = analysis.view(op_instances_view)
    if len(mfu) and len(inst):
        keys = mfu[["rank", "window", "step"]].astype(np.int64)
        inst = inst.merge(keys, how="inner", on=["rank", "window", "step"])
        devices = device_of_ranks(analysis)
        by_device: dict[str, list[int]] = {}
        for rank, device in devices.items():
            by_device.setdefault(device.name if device is not None else "", []).append(rank)
        named = {d.name: d for d in devices.values() if d is not None}
        parts = [roofline(part, named.get(name)) for name, ranks in by_device.items()
                 if len(part := inst[inst["rank"].isin(ranks)])]
        inst = pd.concat(parts, ignore_index=True) if parts else inst
    periods = len(mfu)
    mean = float(mfu["step_ns"].mean()) if periods else float("nan")
    return Basis(inst, periods, mean, float(inst["gpu_ns"].sum()) if len(inst) else 0.0)
