"""The sections of who waits for whom and where a step goes: waiting per rank and step, the worst collectives'
arrivals and transfers (`waits_section`: `step_waits`, `collective_waits`), in a hung or failed job the wait-for
table by process group (`wait_graph_section`: `wait_graph`), and the critical path with the findings' what-if
costs (`critical_path_section`: `critical_path_ops` else `critical_path`, `replay_steps`). None without their
views. Renders only.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding, Mark
from perftracker.evidence import as_evidence
from perftracker.evidence.common import PassEvidence
from perftracker.reports.charts import COLORS, figure, label, tall
from perftracker.reports.sections import Section, Tables, grid, table

WORST = 4  # collectives in the arrival chart
MAX_RANKS = 64
COLUMNS = {"rank": "rank", "caused_ms": "others waited for it (rank-ms)", "times_last": "times last",
           "waited_ms": "it waited (ms)", "transfer_ms": "its transfer (ms)"}
WAIT_GRAPH_COLUMNS = {"group": "process group", "pg": "pg", "collective": "collective (#seq)",
                      "waiting": "waiting ranks", "waits_for": "wait for", "no_dump": "left no dump",
                      "since": "since (UTC)", "source": "source", "root": "leads to root"}
BOUNDS = {"gpu_compute": "GPU compute", "transfer": "transfer", "cpu_launch": "CPU / launch",
          "data_loading": "data loading", "host_sync": "host sync", "memcpy": "memcpy", "wait": "waiting"}
COST_COLUMNS = {"title": "finding", "cost_ms": "ms per step", "share_pct": "% of the step", "source": "from"}


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
             "share_pct": round(100 * f.cost.share_of_step, 1), "source": as_evidence(f.evidence, PassEvidence).get("cost_source", "")}
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
