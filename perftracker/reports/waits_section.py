"""The "Who waits for whom" sections: waiting per rank and step, the worst collectives' arrivals and transfers
(`waits_section`: `step_waits` and `collective_waits`), and in a hung or failed job the wait-for table by process
group (`wait_graph_section`: `wait_graph`, each root named above it). None without their views. Renders only.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding, Mark
from perftracker.reports.charts import COLORS, figure, label, tall
from perftracker.reports.sections import Section, Tables, grid, table

WORST = 4  # collectives in the arrival chart
MAX_RANKS = 64
COLUMNS = {"rank": "rank", "caused_ms": "others waited for it (rank-ms)", "times_last": "times last",
           "waited_ms": "it waited (ms)", "transfer_ms": "its transfer (ms)"}
WAIT_GRAPH_COLUMNS = {"group": "process group", "pg": "pg", "collective": "collective (#seq)",
                      "waiting": "waiting ranks", "waits_for": "wait for", "no_dump": "left no dump",
                      "since": "since (UTC)", "source": "source", "root": "leads to root"}


def wait_graph_section(tables: Tables, findings: list[Finding]) -> Section | None:
    view = table(tables, "wait_graph")
    if view.empty:
        return None
    roots = [f.title for f in findings if Mark.WAIT_ROOT.on(f)]
    note = ("Read from any waiting rank: it waits in the collective of its row for the ranks in 'wait for'; "
            "follow those to the root. " + " ".join(f"Root: {t}." for t in roots[:4]))
    return Section("waitfor", "Who waits for whom", "section_table.html.j2",
                   {"note": note, "table": grid(view, WAIT_GRAPH_COLUMNS, limit=64, source="wait_graph")})


def waits_section(tables: Tables, findings: list[Finding]) -> Section | None:
    steps, coll = table(tables, "step_waits"), table(tables, "collective_waits")
    if steps.empty or not (steps["wait_ns"] > 0).any():
        return None
    per_rank = steps.groupby("rank").agg(caused=("caused_ns", "sum"), times_last=("times_last", "sum"),
                                         waited=("wait_ns", "sum"), transfer=("transfer_ns", "sum")).reset_index()
    per_rank = per_rank.sort_values(["caused", "times_last"], ascending=False, kind="stable")
    shown = per_rank.assign(caused_ms=per_rank["caused"] / 1e6, waited_ms=per_rank["waited"] / 1e6,
                            transfer_ms=per_rank["transfer"] / 1e6)
    figures = [f for f in (wait_heatmap(steps, per_rank["rank"].head(MAX_RANKS).tolist()),
                           worst_collectives(coll)) if f]
    basis = sorted(set(coll["basis"])) if not coll.empty else []
    note = ("Inside each collective, a rank's time is its wait for the last member to arrive plus the transfer "
            "(end minus the last arrival" + (" on aligned clocks" if basis == ["aligned"] else
                                             "; where clocks could not be aligned, the shortest duration") +
            "). Exposed communication elsewhere in this report counts the transfer only.")
    return Section("waits", "Who waits for whom", "section_table.html.j2",
                   {"note": note, "table": grid(shown, COLUMNS, limit=16, source="step_waits")}, figures)


def wait_heatmap(steps: pd.DataFrame, ranks: list[Any]) -> dict[str, Any] | None:
    """Rank x step: the ms each rank waited inside collectives (hover: the waiting it caused)."""
    mine = steps[steps["rank"].isin(ranks)]
    z = mine.pivot_table(index="rank", columns="step", values="wait_ns", aggfunc="sum") / 1e6
    caused = mine.pivot_table(index="rank", columns="step", values="caused_ns", aggfunc="sum").reindex_like(z) / 1e6
    if z.empty:
        return None
    text = [[f"caused {c:.3f} ms" for c in row] for row in caused.fillna(0).to_numpy()]
    fig = go.Figure(go.Heatmap(z=z.round(3).to_numpy(), x=[label(c) for c in z.columns],
                               y=[label(f"rank {r}") for r in z.index], colorscale="Oranges", text=text,
                               colorbar=dict(title="ms waited")))
    return figure(fig, tall(len(z), 18, 120), xaxis_title="step",
                  title="Waiting inside collectives per rank and step (ms; hover: the waiting it caused)")


def worst_collectives(coll: pd.DataFrame) -> dict[str, Any] | None:
    """The collectives that held the most waiting: per rank, its wait then its transfer, from the first arrival."""
    if coll.empty:
        return None
    worst = coll.groupby("instance")["wait_ns"].sum().sort_values(ascending=False).head(WORST)
    worst = worst[worst > 0]
    if worst.empty:
        return None
    rows = coll[coll["instance"].isin(worst.index)].copy()
    rows = rows[rows["rank"].isin(rows.groupby("rank")["wait_ns"].sum().nlargest(MAX_RANKS // WORST).index)]
    rows["from_ms"] = (rows["arrival_ns"] - rows.groupby("instance")["arrival_ns"].transform("min")) / 1e6
    rows["y"] = [label(f"{c} #{i} step {s}: rank {r}") for c, i, s, r in
                 zip(rows["collective"], rows["instance"], rows["step"], rows["rank"])]
    fig = go.Figure()
    fig.add_bar(y=rows["y"].tolist(), x=(rows["wait_ns"] / 1e6).round(4).tolist(), base=rows["from_ms"].round(4).tolist(),
                orientation="h",
                name="waiting for the last to arrive", marker_color=COLORS["idle"])
    fig.add_bar(y=rows["y"].tolist(), x=(rows["transfer_ns"] / 1e6).round(4).tolist(),
                base=(rows["from_ms"] + rows["wait_ns"] / 1e6).round(4).tolist(), orientation="h", name="transfer",
                marker_color=COLORS["comm"])
    return figure(fig, tall(len(rows), 16, 140), barmode="overlay", xaxis_title="ms after the first arrival",
                  title=f"The {len(worst)} collectives with the most waiting: each rank from its arrival (ms after the first)")
