"""What the CPU was doing while the GPU waited: the top-level CPU ops that overlap given time intervals.

`top_level(events)` marks the CPU events not nested in another event of their thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import pandas as pd

from perftracker.analyzers.traces.intervals import covered_within, union
from perftracker.evidence.traces import CpuOpRow
from perftracker.store import Store

CPU_KINDS = ("cpu_op", "collective_cpu", "runtime")  # user annotations wrap regions: not what the CPU did


def top_level(cpu: pd.DataFrame) -> pd.Series:
    """True for the CPU events that start after every earlier event of their thread has ended."""
    order = cpu.sort_values(["tid", "start_ns", "dur_ns"], ascending=[True, True, False])
    end = order["start_ns"] + order["dur_ns"]
    open_until = end.groupby(order["tid"]).cummax().groupby(order["tid"]).shift(1)
    mask = open_until.isna() | (order["start_ns"] >= open_until)
    return mask.reindex(cpu.index)


def cpu_ops_during(store: Store, gaps: pd.DataFrame, limit: int = 5,
                   shapes: Mapping[tuple[int, int, int], str] | None = None) -> list[CpuOpRow]:
    """The top-level CPU work overlapping `gaps`, most time first (docs/internals/analyzers.md)."""
    if gaps.empty or not store.n_events:
        return []
    overlap: dict[str, list[float]] = {}
    seen_shapes: dict[str, Counter[str]] = {}
    total_gap = 0
    for (rank, window), mine in gaps.groupby(["rank", "window"], sort=True):
        ev = store.rank_events(int(str(rank)))  # that rank's rows alone, not a mask over every event
        cpu = ev[(ev["rank"] == rank) & (ev["window"] == window) & (ev["stream"] < 0) & ev["kind"].isin(CPU_KINDS)]
        if cpu.empty:
            continue
        cpu = cpu[top_level(cpu).to_numpy()]
        s, e = union(mine["start_ns"].to_numpy(np.int64), (mine["start_ns"] + mine["dur_ns"]).to_numpy(np.int64))
        total_gap += int((e - s).sum())
        start = cpu["start_ns"].to_numpy(np.int64)
        inside = covered_within(s, e, start, start + cpu["dur_ns"].to_numpy(np.int64))
        names = cpu["name"].astype(str).to_numpy()
        external = cpu["external_id"].to_numpy()
        key_rank, key_window = int(str(rank)), int(str(window))
        for name, ns, ext in zip(names[inside > 0], inside[inside > 0], external[inside > 0]):
            totals = overlap.setdefault(str(name), [0.0, 0.0])
            totals[0] += float(ns)
            totals[1] += 1
            shape = shapes.get((key_rank, key_window, int(ext))) if shapes else None
            if shape is not None and shape != "[]":
                seen_shapes.setdefault(str(name), Counter())[shape] += 1
    ranked = sorted(overlap.items(), key=lambda item: -item[1][0])[:limit]
    found: list[CpuOpRow] = []
    for name, (ns, count) in ranked:
        entry = CpuOpRow(op=name, ms=round(ns / 1e6, 3), share_pct=round(100.0 * ns / total_gap, 1) if total_gap
                         else 0.0, count=int(count))
        if name in seen_shapes:
            entry["input_shapes"] = seen_shapes[name].most_common(1)[0][0]
        found.append(entry)
    return found
