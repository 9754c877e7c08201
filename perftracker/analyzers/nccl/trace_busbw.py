"""The bus bandwidth the traces' collectives reached, from their transfer time only, as measures of the job."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.nccl.context import Measure, NcclContext, context_view
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view
from perftracker.analyzers.thresholds import threshold

BANDWIDTH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
TOPOLOGY_KEYS = ("topo_path", "topo_link")


def _gpus(analysis: Analysis) -> tuple[str, ...]:
    ranks = analysis.store["ranks"]
    if ranks.empty or "device_name" not in ranks:
        return ()
    return tuple(sorted({str(n) for n in ranks["device_name"].dropna() if str(n)}))


def trace_measures(analysis: Analysis) -> list[Measure]:
    """See docs/internals/analyzers.md."""
    split: pd.DataFrame = analysis.view(collective_split_view)
    if split.empty:
        return []
    rows = split[(split["source"].astype(str) == "gpu_kernel") & (split["bytes"] >= threshold("nccl.trace_busbw_min_bytes"))
                 & split["collective"].astype(str).isin(BANDWIDTH_COLLECTIVES)]
    inst = rows.drop_duplicates("instance")
    inst = inst[np.isfinite(inst["busbw_gbs"].to_numpy(float)) & (inst["busbw_gbs"] > 0)]
    gpus = _gpus(analysis)
    out: list[Measure] = []
    for (pg, coll, members), group in inst.groupby([inst["pg"].astype(str), inst["collective"].astype(str),
                                                    inst["members"]], sort=True):
        if len(group) < threshold("nccl.trace_busbw_min_instances"):
            continue
        best = group.iloc[int(group["busbw_gbs"].to_numpy(float).argmax())]
        out.append(Measure("trace", f"{coll} in process group {pg} ({int(members)} ranks, {len(group)} instances "
                           f">= {int(threshold('nccl.trace_busbw_min_bytes')) >> 20} MiB, transfer time only)", float(best["busbw_gbs"]),
                           int(best["bytes"]), f"traces: instance {int(best['instance'])}", gpus, (), int(members)))
    return out


def measured_context_view(analysis: Analysis) -> NcclContext:
    """The run's NCCL context with the traces' measures added where its log shows a topology
    (docs/internals/analyzers.md), once per analysis."""
    ctx = analysis.view(context_view)
    if not any(p.has(key) for p in ctx.procs for key in TOPOLOGY_KEYS):
        return ctx
    extra = trace_measures(analysis)
    return replace(ctx, measured=[*ctx.measured, *extra]) if extra else ctx
