"""The "Layout: data x pipeline parallel" section: the grid of workers as a heatmap of their busy time per step.

`layout_section(tables, findings)` renders the view `layout_grid`; None without it. Renders only.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding
from perftracker.reports.charts import figure, label, tall
from perftracker.reports.sections import Section, Tables, grid, table

COLUMNS = {"rank": "rank", "pp": "stage", "dp": "replica", "tp": "tensor rank", "step_ms": "step (ms)",
           "busy_ms": "busy (ms)", "wait_ms": "waiting (ms)", "cost_ms": "busy beyond the median worker (ms)"}


def layout_section(tables: Tables, findings: list[Finding]) -> Section | None:
    frame = table(tables, "layout_grid")
    if frame.empty:
        return None
    summary = next((f for f in findings if f.analyzer == "pipeline" and f.key == "pipeline:summary"), None)
    layout = (f"Layout {summary.evidence.get('layout', '')}, inferred from {summary.evidence.get('layout_method', '')} "
              f"(confidence {summary.evidence.get('layout_confidence', '')}).") if summary else "Layout of the job."
    note = ("Each cell is one worker: its median time per step not waiting in receives or collectives. A hot column "
            "is a heavy stage (move layers off it); one hot cell is a slow worker, whose pipeline neighbours and "
            "replica peers wait for it.")
    data = {"layout": layout, "pipeline": summary.title if summary else "", "note": note,
            "table": grid(frame.sort_values(["pp", "dp", "tp", "rank"]), COLUMNS, limit=64, source="layout_grid")}
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
