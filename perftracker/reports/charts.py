"""Plotly figures for the report, each a plain function of the report tables (no diagnosis here); for runs of
many ranks, distributions across ranks, rank groups and the slowest ranks (a distribution draws every rank once,
never a bar per rank). Text from the job or an output folder goes through `label` in every name, hover text and
title; `safe_figure` makes any `<` or `>` left raw an entity.
"""


from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from html import escape
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from perftracker.reports.sections import role_text

COLORS = {"compute": "#4C78A8", "comm": "#F58518", "memory": "#54A24B", "idle": "#BAB0AC",
          "memcpy": "#54A24B", "memset": "#88D27A", "runtime": "#B279A2", "cpu_op": "#9D755D",
          "collective_cpu": "#E45756", "sync": "#EECA3B", "gpu_annotation": "#D3D3D3"}
LAYOUT = dict(margin=dict(l=60, r=20, t=40, b=40), height=360, template="plotly_white",
              legend=dict(orientation="h", y=-0.2))


def label(text: object) -> str:
    """`text` safe for plotly's label markup: its markup characters as entities, which plotly shows as is."""
    return escape(str(text), quote=False)


def _rank(rank: object) -> str:
    return label(f"rank {rank}")


def _no_tags(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("<", "&lt;").replace(">", "&gt;") if ("<" in value or ">" in value) else value
    if isinstance(value, Mapping):
        return {k: _no_tags(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_tags(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return [_no_tags(v) for v in value.tolist()]
    return value


def safe_figure(figure: Mapping[str, Any]) -> dict[str, Any]:
    """`figure` (a plotly figure as a dict) with every `<` and `>` left in its strings as entities, which
    plotly shows as text: no markup can come from data (labelled text holds none raw and stays the same)."""
    return {key: _no_tags(value) for key, value in figure.items()}


def figure(fig: go.Figure, height: int | None = None, **layout: Any) -> dict[str, Any]:
    """`fig` laid out (`layout`, then the report's LAYOUT, `height` pixels tall when given) as a plotly dict."""
    fig.update_layout(**layout, **(_LAID_OUT if height is None else {**_LAID_OUT, "height": height}))
    result: dict[str, Any] = fig.to_plotly_json()
    result["layout"]["template"] = copy.deepcopy(_template())  # as plotly writes it, checked once, not per figure
    return result


_LAID_OUT = {key: value for key, value in LAYOUT.items() if key != "template"}


@functools.cache
def _template() -> dict[str, Any]:
    template: dict[str, Any] = go.Figure(layout={"template": LAYOUT["template"]}).to_plotly_json()["layout"]["template"]
    return template


def tall(rows: int, per_row: int, extra: int, low: int = 300, high: int = 2400) -> int:
    """The height of a chart of `rows` rows: `per_row` pixels each and `extra`, within `low`..`high`."""
    return min(high, max(low, per_row * rows + extra))


BREAKDOWN = (("compute_pct", "compute", "compute"), ("comm_exposed_pct", "exposed communication", "comm"),
             ("memory_exposed_pct", "exposed memory copies", "memory"), ("idle_pct", "idle", "idle"))


def mark_changes(fig: go.Figure, change_steps: list[int] | None) -> None:
    """A dashed line at each step from which the steps got slower."""
    for step in change_steps or []:
        fig.add_vline(x=step, line_dash="dash", line_color="#c0392b",
                      annotation_text=f"slower since step {step}", annotation_position="top left")


def step_source(steps: pd.DataFrame) -> pd.DataFrame:
    """The step-file rows of `steps` when it has any (the job's own timing), else every row."""
    files = steps[steps["source"] == "stepfile"] if not steps.empty else steps
    return files if not files.empty else steps


def breakdown_chart(table: pd.DataFrame, many: bool = False) -> dict[str, Any] | None:
    """Each rank's shares of GPU time (compute, exposed communication, memory copies, idle) as stacked bars; with
    `many` ranks one box per share across ranks."""
    if table.empty:
        return None
    labels = [label(f"rank {r}" + (f" w{w}" if w else "")) for r, w in zip(table["rank"], table["window"])]
    fig = go.Figure()
    for col, name, color in BREAKDOWN:
        if many:
            rank_box(fig, table[col], table["rank"], name, COLORS[color])
        else:
            fig.add_bar(x=labels, y=table[col].round(2), name=name, marker_color=COLORS[color])
    if many:
        return figure(fig, title=f"GPU time across {table['rank'].nunique():,} ranks (% of profiled span; points: "
                      "outlier ranks)", yaxis_title="%", showlegend=False)
    return figure(fig, barmode="stack", title="GPU time per rank (% of profiled span)", yaxis_title="%")


def overlap_chart(table: pd.DataFrame, many: bool = False) -> dict[str, Any] | None:
    """Each rank's communication time overlapped with compute and exposed (ms) as stacked bars; with `many` ranks
    boxes across ranks."""
    if table.empty or not (table["comm_ns"] > 0).any():
        return None
    t = table[table["comm_ns"] > 0]
    fig = go.Figure()
    for col, name, color in (("comm_overlapped_ns", "overlapped with compute", "compute"),
                             ("comm_exposed_ns", "exposed", "comm")):
        if many:
            rank_box(fig, t[col] / 1e6, t["rank"], name, COLORS[color])
        else:
            fig.add_bar(x=[_rank(r) for r in t["rank"]], y=(t[col] / 1e6).round(3), name=name,
                        marker_color=COLORS[color])
    if many:
        return figure(fig, title=f"Communication time across {t['rank'].nunique():,} ranks (ms; points: outlier "
                      "ranks)", yaxis_title="ms", showlegend=False)
    return figure(fig, barmode="stack", title="Communication time per rank (ms): overlapped vs exposed",
                  yaxis_title="ms")


def step_time_chart(stats: pd.DataFrame) -> dict[str, Any] | None:
    if stats.empty:
        return None
    labels = [_rank(r) for r in stats["rank"]]
    fig = go.Figure()
    fig.add_bar(x=labels, y=(stats["median_s"] * 1e3).round(3), name="median",
                error_y=dict(type="data", array=((stats["p90_s"] - stats["median_s"]) * 1e3).round(3).tolist(),
                             symmetric=False, arrayminus=[0.0] * len(stats),  # up to p90 only: below is no p10
                             visible=True), marker_color=COLORS["compute"])
    fig.update_yaxes(rangemode="tozero")
    return figure(fig, title="Step time per rank (ms): median, bar to p90", yaxis_title="ms")


def lateness_heatmap(lateness: pd.DataFrame, max_ranks: int = 256) -> dict[str, Any] | None:
    if lateness.empty:
        return None
    grid = lateness.pivot_table(index="rank", columns="step", values="lateness_ms", aggfunc="median")
    grid = grid.iloc[:max_ranks]
    top = float(grid.max().max()) if grid.size else 0.0
    if not top > 0:  # every rank arrived together: nothing to colour (an all-zero map painted solid misleads)
        return None
    fig = go.Figure(go.Heatmap(z=grid.round(3).to_numpy(), x=[label(c) for c in grid.columns],
                               y=[_rank(r) for r in grid.index], colorscale="Reds", zmin=0.0, zmax=top,
                               colorbar=dict(title="ms late")))
    return figure(fig, tall(len(grid), 18, 120), xaxis_title="step",
                  title="Arrival lateness at collectives (median per step, ms after the earliest rank)")


def wait_bars(waits: pd.DataFrame, title: str = "Waiting at collectives per step (ms)") -> dict[str, Any] | None:
    if waits.empty or not (waits[["wait_per_step_s", "cost_per_step_s"]].abs().to_numpy().sum() > 0):
        return None
    labels = [_rank(r) for r in waits["rank"]]
    fig = go.Figure()
    fig.add_bar(x=labels, y=(waits["wait_per_step_s"] * 1e3).round(3), name="time it waited for others",
                marker_color=COLORS["idle"])
    fig.add_bar(x=labels, y=(waits["cost_per_step_s"] * 1e3).round(3), name="time others waited for it",
                marker_color=COLORS["comm"])
    return figure(fig, barmode="group", title=label(title), yaxis_title="ms")


def step_series_chart(steps: pd.DataFrame, max_ranks: int = 32,
                      change_steps: list[int] | None = None) -> dict[str, Any] | None:
    if steps.empty:
        return None
    use = step_source(steps)
    fig = go.Figure()
    for rank in sorted(use["rank"].unique())[:max_ranks]:
        s = use[use["rank"] == rank].sort_values("step")
        fig.add_scatter(x=s["step"], y=(s["dur_ns"] / 1e6).round(3), mode="lines+markers", name=_rank(rank))
    mark_changes(fig, change_steps)
    fig.update_xaxes(tickformat="d")  # steps are whole numbers
    fig.update_yaxes(rangemode="tozero")
    return figure(fig, title="Step time over steps (ms)", xaxis_title="step", yaxis_title="ms")


def timeline_chart(timeline: pd.DataFrame,
                   title: str = "One representative step per rank (ms from step start)") -> dict[str, Any] | None:
    if timeline.empty:
        return None
    timeline = timeline.assign(row=[label(f"r{r} {lane}") for r, lane in zip(timeline["rank"], timeline["lane"])])
    rows = sorted(timeline["row"].unique(), key=lambda x: (int(x.split(" ")[0][1:]), x))
    fig = go.Figure()
    for kind, group in timeline.groupby("kind"):
        fig.add_bar(y=group["row"], x=group["dur_ms"].round(4), base=group["start_ms"].round(4), orientation="h",
                    name=label(kind), marker_color=COLORS.get(str(kind), "#999999"),
                    hovertext=[label(n) for n in group["name"]], hoverinfo="text+x")
    return figure(fig, tall(len(rows), 22, 120), barmode="overlay", title=label(title), xaxis_title="ms",
                  yaxis=dict(categoryorder="array", categoryarray=rows[::-1]))


def profile_figures(ranks_table: pd.DataFrame, shares: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame-share heatmap (frames x ranks) and the samples per rank."""
    ranks = [int(r) for r in ranks_table["rank"]]
    names = [_rank(r) for r in ranks]
    frames = (shares.drop_duplicates("row").sort_values("row")["frame"].astype(str).tolist()
              if not shares.empty else [])
    share = {(str(f), int(r)): float(v) for f, r, v in zip(shares.get("frame", []), shares.get("rank", []),
                                                           shares.get("share_pct", []))}
    z = [[share.get((f, r), 0.0) for r in ranks] for f in frames]
    hover = [[f"rank {r}: {share.get((f, r), 0.0)}% of its samples in {label(f)}" for r in ranks] for f in frames]
    heat = go.Figure(go.Heatmap(z=z, x=names, y=[label(f) for f in frames], colorscale="Blues",
                                colorbar={"title": "% of samples"}, hovertext=hover, hoverinfo="text"))
    heat.update_layout(title="Share of each rank's main-thread samples per frame (frames that differ most)",
                       height=max(320, 40 * len(frames) + 140), margin={"l": 420, "t": 60, "b": 40},
                       yaxis={"autorange": "reversed"})
    counts = go.Figure(go.Bar(x=names, y=[int(n) for n in ranks_table["samples"]]))
    counts.update_layout(title="Main-thread samples per rank", height=260, margin={"t": 50, "b": 40})
    return [heat.to_plotly_json(), counts.to_plotly_json()]


def rank_box(fig: go.Figure, values: pd.Series, ranks: pd.Series, name: str, color: str) -> None:
    """A box of `values` across ranks, each outlier point naming its rank."""
    fig.add_box(y=values.round(3), name=label(name), marker_color=color, boxpoints="outliers",
                hovertext=[label(f"rank {r}") for r in ranks], hoverinfo="y+text")


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
