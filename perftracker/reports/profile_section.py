"""Report section "Where each rank spends its time": the sampled stacks (`profile_samples`) side by side.

Promise: `profile_section(tables, findings)` returns None without profiled ranks (`profile_ranks`);
otherwise a heatmap of the share of each rank's main-thread samples spent in the frames that differ
most between ranks (`profile_shares`, chosen by the analyzers), each rank's sample count, and the
`stack_profile` findings. Frame text comes from the job's stacks: escaped by the template in the
page and by `charts.label` in the chart labels.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding
from perftracker.reports.charts import label
from perftracker.reports.sections import Section, Tables, listed, table


def profile_figures(ranks_table: pd.DataFrame, shares: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame-share heatmap (frames x ranks) and the samples per rank."""
    ranks = [int(r) for r in ranks_table["rank"]]
    names = [f"rank {r}" for r in ranks]
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


def profile_section(tables: Tables, findings: list[Finding]) -> Section | None:
    ranks = table(tables, "profile_ranks")
    if ranks.empty:
        return None
    data = {"rate_hz": int(ranks["rate_hz"].max()), "findings": listed(findings, ("stack_profile",))}
    return Section("profile", "Where each rank spends its time", "section_profile.html.j2", data,
                   profile_figures(ranks, table(tables, "profile_shares")))
