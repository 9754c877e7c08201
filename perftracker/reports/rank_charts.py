"""Plotly figures for runs of many ranks: distributions across ranks, rank groups and the slowest ranks.

Plain functions of the views the analyzers chose; a distribution draws every rank once (never a bar per rank),
so a chart grows by a few bytes per rank. Labels go through `charts.label`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.reports.charts import BREAKDOWN, COLORS, figure, label, mark_changes, step_source, tall
from perftracker.reports.sections import role_text


def _box(fig: go.Figure, values: pd.Series, ranks: pd.Series, name: str, color: str) -> None:
    fig.add_box(y=values.round(3), name=label(name), marker_color=color, boxpoints="outliers",
                hovertext=[label(f"rank {r}") for r in ranks], hoverinfo="y+text")


def breakdown_distribution(table: pd.DataFrame) -> dict[str, Any] | None:
    """One box per share of GPU time (compute, exposed communication, memory copies, idle) across ranks."""
    if table.empty:
        return None
    fig = go.Figure()
    for col, name, color in BREAKDOWN:
        _box(fig, table[col], table["rank"], name, COLORS[color])
    return figure(fig, title=f"GPU time across {table['rank'].nunique():,} ranks (% of profiled span; points: outlier "
                  "ranks)", yaxis_title="%", showlegend=False)


def overlap_distribution(table: pd.DataFrame) -> dict[str, Any] | None:
    """Boxes of communication time overlapped with compute and exposed (ms) across ranks."""
    if table.empty or not (table["comm_ns"] > 0).any():
        return None
    t = table[table["comm_ns"] > 0]
    fig = go.Figure()
    _box(fig, t["comm_overlapped_ns"] / 1e6, t["rank"], "overlapped with compute", COLORS["compute"])
    _box(fig, t["comm_exposed_ns"] / 1e6, t["rank"], "exposed", COLORS["comm"])
    return figure(fig, title=f"Communication time across {t['rank'].nunique():,} ranks (ms; points: outlier ranks)",
                  yaxis_title="ms", showlegend=False)


def families_distribution(families: pd.DataFrame, order: list[str], colors: dict[str, str]) -> dict[str, Any] | None:
    """One box per kernel family of its share of each rank's GPU work (%), families in `order`."""
    if families.empty:
        return None
    fig = go.Figure()
    for family in [f for f in order if f in set(families["family"].astype(str))]:
        mine = families[families["family"].astype(str) == family]
        _box(fig, mine["share_pct"], mine["rank"], family, colors.get(family, "#999999"))
    return figure(fig, title=f"GPU work by kernel family across {families['rank'].nunique():,} ranks "
                  "(% of each rank's GPU work time; points: outlier ranks)", yaxis_title="%", showlegend=False)


def _marks(focus: pd.DataFrame, column: str) -> pd.DataFrame:
    return focus[(focus["role"].isin(["slowest", "median"])) & focus[column].notna()] if not focus.empty else focus


def step_time_histogram(stats: pd.DataFrame, focus: pd.DataFrame) -> dict[str, Any] | None:
    """Histogram of the ranks' median step time, the slowest ranks and the median rank marked under it."""
    if stats.empty:
        return None
    fig = go.Figure()
    fig.add_histogram(x=(stats["median_s"] * 1e3).round(4), nbinsx=40, name="ranks", marker_color=COLORS["compute"])
    marks = _marks(focus, "step_ms")
    if not marks.empty:
        fig.add_scatter(x=marks["step_ms"].round(4), y=[0] * len(marks), mode="markers", name="slowest / median ranks",
                        marker=dict(symbol="triangle-up", size=11, color=COLORS["collective_cpu"]),
                        hovertext=[label(f"rank {r} ({role_text(str(o), int(n))}): {v:.3f} ms")
                                   for r, o, n, v in zip(marks["rank"], marks["role"], marks["order"],
                                                         marks["step_ms"])], hoverinfo="text")
    return figure(fig, title=f"Median step time of each of {len(stats):,} ranks (ms): how many ranks at each",
                  xaxis_title="ms", yaxis_title="ranks")


def step_spread_chart(spread: pd.DataFrame, steps: pd.DataFrame, focus: pd.DataFrame,
                      change_steps: list[int] | None = None) -> dict[str, Any] | None:
    """Step time over steps across ranks (median, p90, min, max with the rank at the max), the slowest rank's and
    the median rank's own lines."""
    if spread.empty:
        return None
    fig = go.Figure()
    for col, name, dash in (("max_ms", "slowest rank of the step", "dot"), ("p90_ms", "p90 across ranks", "dash"),
                            ("median_ms", "median across ranks", "solid"), ("min_ms", "fastest rank", "dot")):
        hover = ([label(f"step {s}: rank {r}, {v:.3f} ms") for s, r, v in zip(spread["step"], spread["max_rank"],
                                                                               spread["max_ms"])]
                 if col == "max_ms" else None)
        fig.add_scatter(x=spread["step"], y=spread[col].round(3), mode="lines+markers", name=name,
                        line=dict(dash=dash, color=COLORS["comm"] if col == "max_ms" else COLORS["compute"]),
                        hovertext=hover, hoverinfo="text" if hover else None)
    use = step_source(steps)
    marks = _marks(focus, "rank")
    for rank, role, order in zip(marks.get("rank", []), marks.get("role", []), marks.get("order", [])):
        if role == "slowest" and int(order) > 1:
            continue
        mine = use[use["rank"] == rank].sort_values("step") if not use.empty else use
        if not mine.empty:
            fig.add_scatter(x=mine["step"], y=(mine["dur_ns"] / 1e6).round(3), mode="lines",
                            name=label(f"rank {rank} ({role_text(str(role), int(order))})"))
    mark_changes(fig, change_steps)
    fig.update_xaxes(tickformat="d")
    return figure(fig, title=f"Step time over steps across {int(spread['ranks'].max()):,} ranks (ms)",
                  xaxis_title="step", yaxis_title="ms")


def lateness_groups_heatmap(groups: pd.DataFrame, grouped_by: str) -> dict[str, Any] | None:
    """Rank groups x steps: the latest rank's median lateness in each group, the group's median and that rank in
    the hover text."""
    if groups.empty or not float(groups["max_ms"].max()) > 0:
        return None
    order = groups.drop_duplicates("group").sort_values("group")
    names = [label(n) for n in order["group_label"]]
    steps = sorted(int(s) for s in groups["step"].unique())
    cells = {(int(g), int(s)): (float(med), float(top), int(rank)) for g, s, med, top, rank in
             zip(groups["group"], groups["step"], groups["median_ms"], groups["max_ms"], groups["max_rank"])}
    z: list[list[float | None]] = []
    hover: list[list[str]] = []
    for g, name in zip(order["group"], names):
        row = [cells.get((int(g), s)) for s in steps]
        z.append([round(c[1], 3) if c else None for c in row])
        hover.append([f"{name}, step {s}: median {c[0]:.3f} ms, latest rank {c[2]} {c[1]:.3f} ms" if c else ""
                      for s, c in zip(steps, row)])
    fig = go.Figure(go.Heatmap(z=z, x=[label(s) for s in steps], y=names, colorscale="Reds", zmin=0.0,
                               zmax=float(groups["max_ms"].max()), colorbar=dict(title="ms late"),
                               hovertext=hover, hoverinfo="text"))
    by = "host" if grouped_by == "host" else "rank range"
    return figure(fig, tall(len(names), 18, 140, high=1400), xaxis_title="step",
                  title=f"Arrival lateness at collectives by {by} ({len(names)} groups): the latest rank of each group, "
                  "ms after the earliest rank", yaxis=dict(autorange="reversed", automargin=True))
