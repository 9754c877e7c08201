"""The report's "Kernels and ops" section: the top GPU kernels and CPU ops, kernel families, and what the CPU
ran while the GPU was idle. `kernels_section(tables, findings)` is None when the run has neither kernels nor CPU
ops; at most TOP_ROWS rows per table. Its charts (`kernels_chart`, `families_chart`) number shortened names, so
two kernels that shorten alike stay two bars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding
from perftracker.reports import charts
from perftracker.reports.charts import figure, label
from perftracker.reports.evidence import measured
from perftracker.reports.sections import Section, Tables, grid, rank_layout, table
from perftracker.values import short_symbol

TEMPLATE = "section_kernels.html.j2"
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
    return Section("kernels", "Kernels and ops", TEMPLATE, data, figures)


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
