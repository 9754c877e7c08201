"""Report section "Where each rank spends its time": the sampled stacks (`profile_samples`) side by side.

Promise: `profile_section(store, findings)` returns None without sampled stacks; otherwise a heatmap
of the share of each rank's main-thread samples spent in the frames that differ most between ranks
(at most MAX_FRAMES, shallow frames first), each rank's sample count, and the `stack_profile`
findings. Frame text comes from the job's stacks: escaped for HTML and for plotly's label markup.
"""

from __future__ import annotations

from html import escape

import plotly.graph_objects as go

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.stragglers.stack_profile import rank_profiles
from perftracker.reports.sections import ReportSection
from perftracker.store import Store

MAX_FRAMES = 14
MAX_RANKS = 256
MIN_SHARE = 0.05  # a frame no rank spends 5% of its time in is not worth a row
MIN_SPREAD = 0.03  # nor one every rank spends the same share in


def profile_section(store: Store, findings: list[Finding]) -> ReportSection | None:
    samples = store["profile_samples"]
    if samples.empty:
        return None
    per_rank = dict(sorted(rank_profiles(store, min_samples=1).items())[:MAX_RANKS])
    if not per_rank:
        return None
    ranks = sorted(per_rank)
    frames = {f for shares, _, _ in per_rank.values() for f in shares}
    spread = {f: max(per_rank[r][0].get(f, 0.0) for r in ranks) - min(per_rank[r][0].get(f, 0.0) for r in ranks)
              for f in frames if max(per_rank[r][0].get(f, 0.0) for r in ranks) >= MIN_SHARE}
    spread = {f: v for f, v in spread.items() if v >= MIN_SPREAD}
    depth = {f: min(per_rank[r][1].get(f, 10**6) for r in ranks) for f in spread}
    rows = sorted(sorted(spread, key=lambda f: -spread[f])[:MAX_FRAMES], key=lambda f: (depth[f], f))
    z = [[round(100 * per_rank[r][0].get(f, 0.0), 1) for r in ranks] for f in rows]
    heat = go.Figure(go.Heatmap(z=z, x=[f"rank {r}" for r in ranks], y=[escape(f) for f in rows],
                                colorscale="Blues", colorbar={"title": "% of samples"},
                                hovertemplate="%{x}<br>%{y}<br>%{z}% of its samples<extra></extra>"))
    heat.update_layout(title="Share of each rank's main-thread samples per frame (frames that differ most)",
                       height=max(320, 40 * len(rows) + 140), margin={"l": 420, "t": 60, "b": 40},
                       yaxis={"autorange": "reversed"})
    counts = go.Figure(go.Bar(x=[f"rank {r}" for r in ranks], y=[per_rank[r][2] for r in ranks]))
    counts.update_layout(title="Main-thread samples per rank", height=260, margin={"t": 50, "b": 40})
    mine = [f for f in findings if f.analyzer == "stack_profile"]
    listed = "".join(f"<li>{escape(f.severity.label)}: {escape(f.title)}</li>" for f in mine)
    rate = samples["rate_hz"].max()
    html = (f"<p>py-spy record of every rank's main thread, side by side ({escape(str(int(rate)))} Hz), "
            "non-blocking. A rank whose time goes somewhere the others' does not is the one they wait for.</p>"
            + (f"<ul>{listed}</ul>" if listed else "<p>No rank stands out from the median rank.</p>"))
    return ReportSection(key="profile", title="Where each rank spends its time", html=html,
                         figures=[heat.to_plotly_json(), counts.to_plotly_json()])
