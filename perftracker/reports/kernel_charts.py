"""Plotly figures of the "Kernels and ops" section: the top kernels by time, the kernel families per rank.
Labels go through `charts.label`; shortened names are numbered so two kernels that shorten alike stay two bars.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.reports.charts import figure, label
from perftracker.values import short_symbol

TOP_BARS = 15
FAMILY_COLORS = {"GEMM": "#4C78A8", "attention": "#B279A2", "convolution": "#72B7B2", "reduction": "#EECA3B",
                 "elementwise": "#9D755D", "communication": "#F58518", "memory": "#54A24B", "other": "#BAB0AC"}


def kernels_chart(kernels: pd.DataFrame) -> dict[str, Any] | None:
    """Horizontal bars: the top kernels across ranks by time per step (total time without steps), by family."""
    if kernels.empty:
        return None
    top = kernels.head(TOP_BARS).reset_index(drop=True)
    per_step = bool(top["ns_per_step"].notna().all())
    value = (top["ns_per_step"] if per_step else top["total_ns"]) / 1e6
    names = [f"{i + 1}. {label(short_symbol(str(n), 50))}" for i, n in enumerate(top["name"])]
    fig = go.Figure()
    for family in dict.fromkeys(top["family"].astype(str)):
        rows = top.index[top["family"].astype(str) == family]
        fig.add_bar(y=[names[i] for i in rows], x=value.iloc[rows].round(4), orientation="h", name=label(family),
                    marker_color=FAMILY_COLORS.get(family, "#999999"),
                    hovertext=[label(str(top.loc[i, "name"])[:400]) for i in rows], hoverinfo="text+x")
    unit = "ms per step (mean over ranks)" if per_step else "ms in the profiled window"
    return figure(fig, max(320, 26 * len(names) + 140), title=f"Top GPU kernels across ranks ({unit})",
                  xaxis_title="ms", yaxis=dict(categoryorder="array", categoryarray=names[::-1], automargin=True))


def families_chart(families: pd.DataFrame, max_ranks: int = 64) -> dict[str, Any] | None:
    """Stacked bars: each rank's GPU work time by kernel family (% of its GPU work)."""
    if families.empty:
        return None
    ranks = sorted(int(r) for r in families["rank"].unique())[:max_ranks]
    shown = families[families["rank"].isin(ranks)]
    labels = [f"rank {r}" for r in ranks]
    fig = go.Figure()
    for family in [f for f in FAMILY_COLORS if f in set(shown["family"].astype(str))]:
        share = shown[shown["family"] == family].set_index("rank")["share_pct"].reindex(ranks).fillna(0.0)
        fig.add_bar(x=labels, y=share.round(2), name=label(family), marker_color=FAMILY_COLORS[family])
    return figure(fig, barmode="stack", title="GPU work per rank by kernel family (% of its GPU work time)",
                  yaxis_title="%")
