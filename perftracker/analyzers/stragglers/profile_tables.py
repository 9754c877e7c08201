"""The report's tables of sampled stacks: where each rank's main thread spends its time, side by side.

`profile_ranks_view` (rank, samples, rate_hz) and `profile_shares_view` (the frames that differ most between
ranks); both are empty without sampled stacks.
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.stack_profile import rank_profiles_view

MAX_FRAMES = 14
MAX_RANKS = 256
MIN_SHARE = 0.05  # a frame no rank spends 5% of its time in is not worth a row
MIN_SPREAD = 0.03  # nor one every rank spends the same share in
RANK_COLUMNS = ["rank", "samples", "rate_hz"]
SHARE_COLUMNS = ["row", "frame", "rank", "share_pct"]


def _profiles(analysis: Analysis) -> dict[int, tuple[dict[str, float], dict[str, int], int]]:
    return dict(sorted(analysis.view(rank_profiles_view).items())[:MAX_RANKS])


def profile_ranks_view(analysis: Analysis) -> pd.DataFrame:
    """rank, samples (main-thread samples), rate_hz of each profiled rank."""
    per_rank = _profiles(analysis)
    if not per_rank:
        return pd.DataFrame(columns=RANK_COLUMNS)
    samples = analysis.store["profile_samples"]
    rate = samples.groupby("rank")["rate_hz"].max()
    return pd.DataFrame({"rank": list(per_rank), "samples": [p[2] for p in per_rank.values()],
                         "rate_hz": [float(rate.get(r, float("nan"))) for r in per_rank]})


def profile_shares_view(analysis: Analysis) -> pd.DataFrame:
    """The frames that differ most between ranks, with each rank's share of samples in them (%)."""
    per_rank = _profiles(analysis)
    ranks = sorted(per_rank)
    frames = {f for shares, _, _ in per_rank.values() for f in shares}
    spread = {f: max(per_rank[r][0].get(f, 0.0) for r in ranks) - min(per_rank[r][0].get(f, 0.0) for r in ranks)
              for f in frames if max(per_rank[r][0].get(f, 0.0) for r in ranks) >= MIN_SHARE}
    spread = {f: v for f, v in spread.items() if v >= MIN_SPREAD}
    depth = {f: min(per_rank[r][1].get(f, 10**6) for r in ranks) for f in spread}
    rows = sorted(sorted(spread, key=lambda f: -spread[f])[:MAX_FRAMES], key=lambda f: (depth[f], f))
    records = [(i, f, r, round(100 * per_rank[r][0].get(f, 0.0), 1)) for i, f in enumerate(rows) for r in ranks]
    return pd.DataFrame(records, columns=SHARE_COLUMNS)
