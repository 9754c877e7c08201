"""Report sections drawn from traces, step times and sampled stacks: GPU time breakdown, overlap, kernels and ops
(`kernels_section`: top kernels and CPU ops, kernel families, what the CPU ran while the GPU was idle), step time,
stragglers, timeline, the data x pipeline layout (`layout_grid`), where each rank spends its time.

Each is `(tables, findings) -> Section | None`; tables show at most 64 rows; with many ranks the charts are
distributions and the tables list the ranks the analyzers picked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding, Kind
from perftracker.evidence import as_evidence
from perftracker.evidence.steps import DegradationEvidence, PipelineEvidence
from perftracker.reports import charts
from perftracker.reports.charts import figure, label, tall
from perftracker.reports.evidence import measured
from perftracker.reports.sections import (
    Section,
    Tables,
    focus_rows,
    grid,
    listed,
    rank_layout,
    role_text,
    table,
)
from perftracker.values import short_symbol

TEMPLATE = "section_table.html.j2"
BREAKDOWN_COLUMNS = {"rank": "rank", "window": "window", "compute_pct": "compute %",
                     "comm_exposed_pct": "exposed comm %", "memory_exposed_pct": "exposed memory %",
                     "idle_pct": "idle %", "overlap_pct": "comm overlapped %", "steps": "steps"}
STEP_COLUMNS = {"rank": "rank", "steps": "steps", "median_ms": "median ms", "p90_ms": "p90 ms", "max_ms": "max ms"}
FOCUS_COLUMNS = {"rank": "rank", "shown_as": "shown as", "host": "host", "wait_cost_ms": "others wait for it (ms per step)",
                 "lateness_ms": "median lateness (ms)", "step_ms": "median step (ms)"}
LAYOUT_COLUMNS = {"rank": "rank", "pp": "stage", "dp": "replica", "tp": "tensor rank", "step_ms": "step (ms)",
           "busy_ms": "busy (ms)", "wait_ms": "waiting (ms)", "cost_ms": "busy beyond the median worker (ms)"}


def _rows(frame: pd.DataFrame, columns: dict[str, str], view: str, tables: Tables) -> dict[str, object]:
    """The table under a chart: the first 64 rows, or with many ranks the focus ranks' rows (why each is shown)
    and a note saying so."""
    ranks, many, _ = rank_layout(tables)
    if not many:
        return {"table": grid(frame, columns, source=view)}
    return {"table": grid(focus_rows(frame, table(tables, "rank_focus")),
                          {"rank": "rank", "shown_as": "shown as", **{k: v for k, v in columns.items() if k != "rank"}},
                          source=view, total=len(frame)),
            "note": f"{ranks:,} ranks: the charts show how the ranks spread, the slowest ranks and the median rank, "
                    f"and the table lists those ranks (every rank's row: tables/{view}.parquet)."}


def breakdown_section(tables: Tables, findings: list[Finding]) -> Section | None:
    bd = table(tables, "breakdown")
    chart = charts.breakdown_chart(bd, many=rank_layout(tables)[1])
    return Section("breakdown", "GPU time breakdown", TEMPLATE, _rows(bd, BREAKDOWN_COLUMNS, "breakdown", tables),
                   [chart]) if chart else None


def overlap_section(tables: Tables, findings: list[Finding]) -> Section | None:
    bd = table(tables, "breakdown")
    chart = charts.overlap_chart(bd, many=rank_layout(tables)[1])
    return Section("overlap", "Communication / compute overlap", TEMPLATE, {}, [chart]) if chart else None


def steps_section(tables: Tables, findings: list[Finding]) -> Section | None:
    stats, steps = table(tables, "step_stats"), table(tables, "steps")
    changes = [int(step) for f in findings if f.analyzer == Kind.DEGRADATION
               and (step := as_evidence(f.evidence, DegradationEvidence).get("change_step")) is not None]
    if rank_layout(tables)[1]:
        focus = table(tables, "rank_focus")
        found = (charts.step_time_histogram(stats, focus),
                 charts.step_spread_chart(table(tables, "step_spread"), steps, focus, change_steps=changes))
    else:
        found = (charts.step_time_chart(stats), charts.step_series_chart(steps, change_steps=changes))
    figures = [f for f in found if f]
    if not figures:
        return None
    data = _rows(stats.assign(**{f"{c}_ms": (stats[f"{c}_s"] * 1e3) for c in ("median", "p90", "max")}), STEP_COLUMNS,
                 "step_stats", tables) if not stats.empty else {}
    return Section("steps", "Step time", TEMPLATE, data, figures)


def stragglers_section(tables: Tables, findings: list[Finding]) -> Section | None:
    ranks, many, grouped_by = rank_layout(tables)
    waits = table(tables, "rank_waits")
    if not many:
        figures = [f for f in (charts.lateness_heatmap(table(tables, "lateness")), charts.wait_bars(waits)) if f]
        return Section("stragglers", "Stragglers at collectives", TEMPLATE, {}, figures) if figures else None
    focus = table(tables, "rank_focus")
    picked = focus_rows(waits, focus) if not waits.empty else waits
    slowest = int((focus["role"] == "slowest").sum()) if not focus.empty else 0
    title = f"Waiting at collectives per step (ms): {slowest} slowest of {ranks:,} ranks, peers, median"
    figures = [f for f in (charts.lateness_groups_heatmap(table(tables, "lateness_groups"), grouped_by),
                           charts.wait_bars(picked, title)) if f]
    if not figures:
        return None
    data: dict[str, object] = {
        "note": f"{ranks:,} ranks: lateness is binned by {'host' if grouped_by == 'host' else 'rank range'} "
                "(each cell the latest rank of the group, named in its hover text), the bars show the ranks below.",
        "table": grid(focus.assign(shown_as=[role_text(str(r), int(o)) for r, o in zip(focus["role"], focus["order"])]),
                      {k: v for k, v in FOCUS_COLUMNS.items() if k != "host" or (focus["host"] != "").any()},
                      source="rank_focus") if not focus.empty else {"head": [], "rows": [], "more": 0}}
    return Section("stragglers", "Stragglers at collectives", TEMPLATE, data, figures)


def timeline_title(timeline: pd.DataFrame, focus: pd.DataFrame, ranks: int) -> str:
    """The timeline chart's title: every rank, or which ranks it shows and why (from `rank_focus`)."""
    shown = sorted({int(r) for r in timeline["rank"]}) if not timeline.empty else []
    if not shown or len(shown) >= ranks:
        return "One representative step per rank (ms from step start)"
    mine = focus[focus["rank"].astype(int).isin(shown)] if not focus.empty else focus
    parts, named = [], set()
    if not mine.empty:
        slowest = mine[mine["role"] == "slowest"]
        first = int(slowest["rank"].iloc[0]) if not slowest.empty else None
        for role, words in (("slowest", "slowest"), ("host peer", f"on {first}'s host"),
                            ("rank neighbour", f"{first}'s neighbours"), ("median", "median")):
            members = [int(r) for r in mine.loc[mine["role"] == role, "rank"]]
            members = members if role == "slowest" else sorted(members)  # the slowest in their order
            if members:
                parts.append(f"{words} {', '.join(str(r) for r in members)}")
                named.update(members)
    others = [r for r in shown if r not in named]
    if others:
        parts.append(("ranks " if parts else "") + ", ".join(str(r) for r in others))
    return f"One step of {len(shown)} of {ranks:,} ranks (ms): " + "; ".join(parts)


def timeline_section(tables: Tables, findings: list[Finding]) -> Section | None:
    timeline = table(tables, "timeline")
    chart = charts.timeline_chart(timeline, timeline_title(timeline, table(tables, "rank_focus"), rank_layout(tables)[0]))
    return Section("timeline", "Timeline of a representative step", TEMPLATE, {}, [chart]) if chart else None


def profile_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """A heatmap of the frames that differ most between ranks, each rank's sample count and the `stack_profile`
    findings; None without profiled ranks."""
    ranks = table(tables, "profile_ranks")
    if ranks.empty:
        return None
    data = {"rate_hz": int(ranks["rate_hz"].max()), "findings": listed(findings, ("stack_profile",))}
    return Section("profile", "Where each rank spends its time", "section_profile.html.j2", data,
                   charts.profile_figures(ranks, table(tables, "profile_shares")))


def layout_section(tables: Tables, findings: list[Finding]) -> Section | None:
    frame = table(tables, "layout_grid")
    if frame.empty:
        return None
    summary = next((f for f in findings if f.analyzer == Kind.PIPELINE and f.key == "pipeline:summary"), None)
    ev = as_evidence(summary.evidence if summary else {}, PipelineEvidence)
    layout = (f"Layout {ev.get('layout', '')}, inferred from {ev.get('layout_method', '')} "
              f"(confidence {ev.get('layout_confidence', '')}).") if summary else "Layout of the job."
    note = ("Each cell is one worker: its median time per step not waiting in receives or collectives. A hot column "
            "is a heavy stage (move layers off it); one hot cell is a slow worker, whose pipeline neighbours and "
            "replica peers wait for it.")
    data = {"layout": layout, "pipeline": summary.title if summary else "", "note": note,
            "table": grid(frame.sort_values(["pp", "dp", "tp", "rank"]), LAYOUT_COLUMNS, limit=64, source="layout_grid")}
    return Section("layout", "Layout: data x pipeline parallel", "section_layout.html.j2", data,
                   [f for f in [grid_heatmap(frame)] if f])


def grid_heatmap(frame: Any) -> dict[str, Any] | None:
    """Replica (rows) x stage (columns): busy ms per step of each worker (tensor ranks of one cell: their max)."""
    cells = frame.groupby(["dp", "pp"]).agg(busy=("busy_ms", "max"), wait=("wait_ms", "max"), cost=("cost_ms", "max"),
                                            ranks=("rank", lambda r: ", ".join(str(int(x)) for x in sorted(r))))
    z = cells["busy"].unstack("pp")
    if z.empty:
        return None
    text = [[(f"rank {cells.loc[(d, p), 'ranks']}: waiting {cells.loc[(d, p), 'wait']:.1f} ms, "
              f"cost {cells.loc[(d, p), 'cost']:.1f} ms") if (d, p) in cells.index else ""
             for p in z.columns] for d in z.index]
    labels = [[(f"rank {cells.loc[(d, p), 'ranks']}: {z.loc[d, p]:.1f} ms") if (d, p) in cells.index else ""
               for p in z.columns] for d in z.index]
    fig = go.Figure(go.Heatmap(z=z.round(3).to_numpy().tolist(), x=[label(f"stage {p}") for p in z.columns],
                               y=[label(f"replica {d}") for d in z.index], colorscale="Oranges",
                               text=[[label(t) for t in row] for row in labels], texttemplate="%{text}",
                               hovertext=[[label(t) for t in row] for row in text],
                               colorbar=dict(title="busy ms/step")))
    return figure(fig, tall(len(z), 60, 160, low=260, high=1200), xaxis_title="pipeline stage",
                  title="Workers by replica and stage: busy time per step (ms; hover: waiting and cost)",
                  yaxis_title="data-parallel replica", yaxis_autorange="reversed")


KERNELS_TEMPLATE = "section_kernels.html.j2"
TOP_ROWS = 20
PER_RANK_ROWS = 10
MAX_RANKS = 8
KERNEL_HEAD = ["kernel", "family", "launched by", "count", "total ms", "ms per step", "mean us", "p90 us",
               "% of GPU work", "ranks"]
OP_HEAD = ["op", "kind", "count", "total ms", "self ms", "ms per step", "mean us", "p90 us", "self %", "ranks"]
GAP_HEAD = ["rank", "step", "kind of gap", "gap ms", "CPU ops in the gap (own time)", "kernel after it", "launched by"]
IDLE_OP_HEAD = ["rank", "kind of gap", "op", "kind", "ms in gaps", "% of those gaps"]
TEXT_COLUMNS = {"kernel", "family", "launched by", "op", "kind", "kind of gap", "CPU ops in the gap (own time)",
                "kernel after it"}
TOP_BARS = 15
FAMILY_COLORS = {"GEMM": "#4C78A8", "attention": "#B279A2", "convolution": "#72B7B2", "reduction": "#EECA3B",
                 "elementwise": "#9D755D", "communication": "#F58518", "memory": "#54A24B", "other": "#BAB0AC"}


_ms = partial(measured, scale=1e6)  # ns as ms, "-" when not measured
_us = partial(measured, scale=1e3)  # ns as us
# how a column's value is shown (any other column: as text)
SHOW: dict[str, Callable[[Any], str]] = {
    "launched_by": lambda v: short_symbol(str(v), 60), "count": lambda v: f"{int(v):,}", "total_ns": _ms,
    "self_ns": _ms, "ns_per_step": _ms, "dur_ns": _ms, "mean_ns": _us, "p90_ns": _us, "share_pct": measured,
    "ranks": lambda v: str(int(v)), "rank": lambda v: str(int(v)), "step": lambda v: str(int(v)) if int(v) >= 0 else "-",
    "category": lambda v: str(v).replace("_", " ")}


@dataclass(frozen=True)
class Spec:
    """A table of kernels or ops: its head, the column named (shortened to `short`), the columns after it and
    before it; the rows in their order, or by `by` (largest first)."""

    head: list[str]
    name: str
    cells: tuple[str, ...]
    before: tuple[str, ...] = ()
    short: int = 80
    by: str = ""


KERNELS = Spec(KERNEL_HEAD, "name", ("family", "launched_by", "count", "total_ns", "ns_per_step", "mean_ns", "p90_ns",
                                     "share_pct", "ranks"))
OPS = Spec(OP_HEAD, "name", ("kind", "count", "total_ns", "self_ns", "ns_per_step", "mean_ns", "p90_ns", "share_pct",
                             "ranks"))
GAPS = Spec(GAP_HEAD, "next_kernel", ("launched_by",), ("rank", "step", "category", "dur_ns", "cpu_ops"), 60, "dur_ns")
IDLE_OPS = Spec(IDLE_OP_HEAD, "name", ("kind", "self_ns", "share_pct"), ("rank", "category"), by="self_ns")


def _named(spec: Spec, frame: pd.DataFrame, limit: int) -> dict[str, Any] | None:
    """The first `limit` rows of `frame` as the table `spec` says (its name cell: the full and the shortened name),
    how many more there are and which columns are text (`left`); None without rows."""
    if frame.empty:
        return None
    ranked = frame.sort_values(spec.by, ascending=False, kind="stable") if spec.by else frame
    rows = [[*(SHOW.get(c, str)(r[c]) for c in spec.before),
             {"name": str(r[spec.name]), "short": short_symbol(str(r[spec.name]), spec.short)},
             *(SHOW.get(c, str)(r[c]) for c in spec.cells)] for r in ranked.head(limit).to_dict("records")]
    return {"head": spec.head, "rows": rows, "more": max(0, len(frame) - limit), "name_at": len(spec.before),
            "left": [h in TEXT_COLUMNS for h in spec.head]}


def _families(frame: pd.DataFrame, ranks: list[int] | None = None) -> dict[str, Any]:
    """Share of GPU work per family, one row per rank: the first 64 ranks, or `ranks` (in their order)."""
    shares = frame.pivot_table(index="rank", columns="family", values="share_pct", aggfunc="sum").fillna(0.0)
    order = [f for f in FAMILY_COLORS if f in shares.columns]
    shown = shares[order] if ranks is None else shares[order].reindex([r for r in ranks if r in shares.index])
    return grid(shown.reset_index(), {"rank": "rank", **{f: (f"{f} %", measured) for f in order}},
                64 if ranks is None else len(shown), "kernel_families", total=len(shares))


def _of_rank(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    return frame[frame["rank"] == rank] if not frame.empty else frame


def kernels_section(tables: Tables, findings: list[Finding]) -> Section | None:
    kernels, ops = table(tables, "kernels"), table(tables, "ops")
    if kernels.empty and ops.empty:
        return None
    per_rank_k, per_rank_o = table(tables, "kernels_per_rank"), table(tables, "ops_per_rank")
    ranks = sorted({int(r) for frame in (per_rank_k, per_rank_o) if not frame.empty for r in frame["rank"]})
    many = rank_layout(tables)[1]
    focus = table(tables, "rank_focus")
    focus_ranks = [int(r) for r in focus["rank"] if int(r) in set(ranks)] if many and not focus.empty else None
    if focus_ranks:  # many ranks: the slowest ones, their peers and the median rank first
        ranks = focus_ranks + [r for r in ranks if r not in set(focus_ranks)]
    per_rank = [{"rank": r, "kernels": _named(KERNELS, _of_rank(per_rank_k, r), PER_RANK_ROWS),
                 "ops": _named(OPS, _of_rank(per_rank_o, r), PER_RANK_ROWS)} for r in ranks[:MAX_RANKS]] \
        if len(ranks) > 1 else []
    families = table(tables, "kernel_families")
    data = {
        "kernels": _named(KERNELS, kernels, TOP_ROWS), "ops": _named(OPS, ops, TOP_ROWS),
        "families": _families(families, focus_ranks) if not families.empty else None,
        "per_rank": per_rank, "ranks_more": max(0, len(ranks) - MAX_RANKS) if len(ranks) > 1 else 0,
        "longest_gaps": _named(GAPS, table(tables, "idle_longest"), TOP_ROWS // 2),
        "idle_ops": _named(IDLE_OPS, table(tables, "idle_ops"), TOP_ROWS // 2),
    }
    figures = [f for f in (kernels_chart(kernels), families_chart(families, many)) if f]
    return Section("kernels", "Kernels and ops", KERNELS_TEMPLATE, data, figures)


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


def families_chart(families: pd.DataFrame, many: bool = False, max_ranks: int = 64) -> dict[str, Any] | None:
    """Stacked bars: each rank's GPU work time by kernel family (% of its GPU work); with `many` ranks one box per
    family of its share of each rank's GPU work."""
    if families.empty:
        return None
    if many:
        fig = go.Figure()
        for family in [f for f in FAMILY_COLORS if f in set(families["family"].astype(str))]:
            mine = families[families["family"].astype(str) == family]
            charts.rank_box(fig, mine["share_pct"], mine["rank"], family, FAMILY_COLORS[family])
        return figure(fig, title=f"GPU work by kernel family across {families['rank'].nunique():,} ranks "
                      "(% of each rank's GPU work time; points: outlier ranks)", yaxis_title="%", showlegend=False)
    ranks = sorted(int(r) for r in families["rank"].unique())[:max_ranks]
    shown = families[families["rank"].isin(ranks)]
    labels = [f"rank {r}" for r in ranks]
    fig = go.Figure()
    for family in [f for f in FAMILY_COLORS if f in set(shown["family"].astype(str))]:
        share = shown[shown["family"] == family].set_index("rank")["share_pct"].reindex(ranks).fillna(0.0)
        fig.add_bar(x=labels, y=share.round(2), name=label(family), marker_color=FAMILY_COLORS[family])
    return figure(fig, barmode="stack", title="GPU work per rank by kernel family (% of its GPU work time)",
                  yaxis_title="%")
