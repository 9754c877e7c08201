"""The "Critical path and what-if costs" section: where each rank's step went, and what each cause costs.

`critical_path_section(tables, findings)` renders `critical_path_ops` (else `critical_path`), `replay_steps` and
the findings' costs with their `cost_source`. None without the critical path. Renders only.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding
from perftracker.reports.charts import figure, label
from perftracker.reports.sections import Section, Tables, grid, table

MAX_RANKS = 64
BOUNDS = {"gpu_compute": "GPU compute", "transfer": "transfer", "cpu_launch": "CPU / launch",
          "data_loading": "data loading", "host_sync": "host sync", "memcpy": "memcpy", "wait": "waiting"}
COST_COLUMNS = {"title": "finding", "cost_ms": "ms per step", "share_pct": "% of the step", "source": "from"}


def critical_path_section(tables: Tables, findings: list[Finding]) -> Section | None:
    fit = table(tables, "replay_steps")
    path, ops = table(tables, "critical_path_ops"), True
    if path.empty or not (path["path_ns"] > 0).any():
        path, ops = table(tables, "critical_path"), False
    if path.empty or not (path["path_ns"] > 0).any():
        return None
    steps = max(int(path["step"].nunique()), 1)
    coarse = sorted({int(r) for r in path.loc[path["coarsened"].astype(bool), "rank"]}) \
        if ops and "coarsened" in path else []
    per, shown, columns = _by_bound(path, "path_ns", steps)
    error = float(fit["error"].median()) if not fit.empty and fit["error"].notna().any() else float("nan")
    note = ("The critical path of each step runs through each rank's work between its collectives, every "
            "collective's transfer (which starts when its last member arrives) and the rank that arrived last. "
            + ("Within a rank it follows what released each op: its launch, the kernel before it on its stream, a "
               "kernel on another stream, a host sync that waited for the GPU. " if ops else "")
            + "Per rank, the path's time per step by what bound it. "
            + (f"Ranks {', '.join(str(r) for r in coarse)} had more GPU work per step than the op graph keeps: "
               "back-to-back kernels of one kind on a stream were taken as one, their small gaps counted with them. "
               if coarse else "")
            + (f"The step graph replays the measured step times with a median error of {100 * error:.1f}%."
               if error == error else "No step could be replayed."))
    costs = _costs(findings)
    source = "critical_path_ops" if ops else "critical_path"
    own, own_columns = _own(path, steps)
    return Section("critical_path", "Critical path and what-if costs", "critical_path.html.j2",
                   {"note": note, "table": grid(shown.reset_index(), columns, limit=16, source=source),
                    "own": grid(own, own_columns, limit=16, source=source),
                    "own_note": ("Each rank's own step time by class (ms per step): what bound it within the rank, "
                                 "and its waiting at collectives for the rank whose arrival released the transfer."),
                    "costs": grid(costs, COST_COLUMNS, limit=16),
                    "costs_note": ("'replay': the step time a replay of the step graph without the cause saves, "
                                   "taken one cause after another so that costs add up; 'estimate': the "
                                   "analyzer's own (the replay did not fit or cannot remove that cause).")},
                   [path_chart(per)])


def _by_bound(path: pd.DataFrame, column: str, steps: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """Per rank (the MAX_RANKS with the most), `column` in ms per step by bound class; those columns in BOUNDS'
    order, rounded, and their labels."""
    per = path.groupby(["rank", "bound"])[column].sum().unstack(fill_value=0) / steps / 1e6
    per = per.loc[per.sum(axis=1).sort_values(ascending=False).index].head(MAX_RANKS)
    shown = per.reindex(columns=[b for b in BOUNDS if b in per.columns]).round(3)
    return per, shown, {"rank": "rank", **{b: f"{BOUNDS[b]} (ms/step)" for b in BOUNDS if b in per.columns}}


def _own(path: pd.DataFrame, steps: int) -> tuple[pd.DataFrame, dict[str, str]]:
    """Per rank: its own step time by class (ms per step) and the rank it waited for most."""
    _, shown, columns = _by_bound(path, "ns", steps)
    waits = path[(path["bound"] == "wait") & (path["for_rank"] >= 0)]
    ranked = waits.groupby(["rank", "for_rank"])["ns"].sum().reset_index().sort_values("ns", ascending=False)
    most = ranked.drop_duplicates("rank").set_index("rank")["for_rank"]
    shown["waited_for"] = [f"rank {int(most[r])}" if r in most.index else "" for r in shown.index]
    return shown.reset_index(), {**columns, "waited_for": "waited most for"}


def _costs(findings: list[Finding]) -> pd.DataFrame:
    rows = [{"title": f.title[:140], "cost_ms": round(f.cost.seconds_per_step * 1e3, 3),
             "share_pct": round(100 * f.cost.share_of_step, 1), "source": str(f.evidence.get("cost_source", ""))}
            for f in findings if f.cost.seconds_per_step > 0]
    return pd.DataFrame(rows, columns=list(COST_COLUMNS))


def path_chart(per: pd.DataFrame) -> dict[str, Any]:
    """Stacked bars: per rank, the critical path's ms per step by bound class."""
    fig = go.Figure()
    ranks = [label(f"rank {r}") for r in per.index]
    for bound, name in BOUNDS.items():
        if bound in per.columns and (per[bound] > 0).any():
            fig.add_bar(x=ranks, y=per[bound].round(4).tolist(), name=name)
    return figure(fig, title="The critical path per step, by rank and what bound it (ms per step)", barmode="stack",
                  yaxis_title="ms per step")
