"""Is one GPU really below its peers on a sampled metric (SM clock, utilization), beyond the run's noise?"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.stragglers.significance import judge_outliers
from perftracker.analyzers.thresholds import threshold

MAX_BINS = 50

GpuKey = tuple[str, int]


@dataclass(frozen=True)
class PeerVerdict:
    """Which GPUs are significantly below their peers on one metric."""

    named: frozenset[GpuKey]
    confidence: float
    trials: int
    reason: str

    def names(self, key: GpuKey) -> bool:
        return key in self.named


def _series(wide: pd.DataFrame, metric: str, busy_only: bool) -> pd.Series:
    col = wide[metric].dropna() if metric in wide else pd.Series(dtype=float)
    if busy_only and "util_gpu_pct" in wide and (wide["util_gpu_pct"] >= threshold("peer_outliers.busy_util_pct")).any():
        col = col[wide["util_gpu_pct"].reindex(col.index) >= threshold("peer_outliers.busy_util_pct")]
    return col


def peer_verdict(wide_by_gpu: dict[GpuKey, pd.DataFrame], metric: str, busy_only: bool) -> PeerVerdict:
    """See docs/internals/analyzers.md. Lower values of `metric` are worse."""
    series = {key: _series(wide, metric, busy_only) for key, wide in sorted(wide_by_gpu.items())}
    series = {key: s for key, s in series.items() if len(s)}
    if len(series) < 2:
        return PeerVerdict(frozenset(), 0.0, 0, "fewer than two GPUs sampled: nothing to compare with")
    start = min(int(s.index.min()) for s in series.values())
    end = max(int(s.index.max()) for s in series.values())
    bins = max(1, min(MAX_BINS, max(len(s) for s in series.values())))
    width = max((end - start) / bins, 1.0)
    keys = list(series)
    frames = []
    for column, key in enumerate(keys):
        s = series[key]
        trial = np.minimum(((s.index.to_numpy(dtype=np.int64) - start) / width).astype(np.int64), bins - 1)
        per_bin = pd.Series(s.to_numpy(dtype=float)).groupby(trial).median()
        frames.append(pd.DataFrame({"trial": per_bin.index, "rank": column, "value": -per_bin.to_numpy()}))
    verdict = judge_outliers(pd.concat(frames, ignore_index=True))
    named = frozenset(keys[i] for i in verdict.ranks) if verdict.significant else frozenset()
    return PeerVerdict(named, verdict.confidence, verdict.trials, verdict.reason)
