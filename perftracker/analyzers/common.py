"""Shared per-rank context for analyzers: step time and host of each rank window."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pandas as pd

from perftracker.store import Store


def preferred(steps: pd.DataFrame, source: str) -> pd.DataFrame:
    """The steps from `source` ("profiler", "stepfile") when there are any, else all of them."""
    chosen = steps[steps["source"] == source]
    return chosen if not chosen.empty else steps


def step_seconds(store: Store) -> pd.Series:
    """Median step duration in seconds per rank (profiler steps first, step files otherwise)."""
    if store.steps.empty:
        return pd.Series(dtype=float)
    return preferred(store.steps, "profiler").groupby("rank")["dur_ns"].median() / 1e9


def median_step_s(steps: pd.DataFrame) -> float:
    """The median duration (s) of every rank's steps; 0 without steps."""
    return float(steps["dur_ns"].median()) / 1e9 if len(steps) else 0.0


def hosts_of(store: Store, ranks: list[int]) -> tuple[str, ...]:
    return tuple(sorted({h for h in (store.host_of(r) for r in ranks) if h}))


def clock_utc(ns: int) -> str:
    """Epoch ns as the time of day people read in a title: "10:02:11 UTC"."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%H:%M:%S UTC")


def pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def ranks_text(ranks: Sequence[int], limit: int | None = 16) -> str:
    """The ranks sorted, the first `limit` of them ("..." after them; all when None)."""
    shown = sorted(ranks)[:limit]
    return ", ".join(str(r) for r in shown) + ("..." if len(shown) < len(ranks) else "")


def who(ranks: Sequence[int], limit: int | None = 16) -> str:
    """"Rank 3", or "Ranks 1, 2, 5" (`ranks_text`)."""
    return f"Rank {ranks[0]}" if len(ranks) == 1 else f"Ranks {ranks_text(ranks, limit)}"


def rank_list(ranks: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    return shown + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")
