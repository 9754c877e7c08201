"""A report of thousands of ranks reads: distributions, rank groups and the slowest ranks, under 5 MB.

The tables are built synthetically here (the views' pure functions over made-up per-rank tables), so no
4096-rank analysis runs in CI; benchmarks/README.md has the end-to-end 4096-rank run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.ranks.focus import binned, focus_ranks, rank_measures, spread_over_steps
from perftracker.analyzers.ranks.groups import MAX_GROUPS, group_ranks, layout
from perftracker.analyzers.traces.merged_timeline import pick_ranks
from perftracker.reports import html as html_report
from tests.reports.test_report_browser import DESKTOP, NARROW, assert_reads_cleanly, render_checked

RANKS, STEPS, STRAGGLER, PER_HOST = 4096, 5, 1366, 8
LIMIT = 5_000_000
_FIGURES = re.compile(r'<script type="application/json" id="figures">(.*?)</script>', re.S)
_TABLE = re.compile(r"<table[ >].*?</table>", re.S)


def _tables(ranks: int, hosts: bool) -> dict[str, pd.DataFrame]:
    """The report views of a made-up run of `ranks` ranks, rank STRAGGLER 2 ms late at every collective."""
    rng = np.random.default_rng(0)
    rank = np.arange(ranks)
    late = rng.uniform(0.0, 0.2, (ranks, STEPS))
    late[STRAGGLER] += 2.0
    step = np.tile(np.arange(10, 10 + STEPS), ranks)
    lateness = pd.DataFrame({"rank": np.repeat(rank, STEPS), "step": step, "lateness_ms": late.ravel()})
    cost = np.where(rank == STRAGGLER, 7.5e-3, 0.0)
    metrics = pd.DataFrame({"cost_per_step_s": cost, "median_lateness_s": np.median(late, axis=1) / 1e3}, index=rank)
    waits = pd.DataFrame({"rank": rank, "share_last": np.where(rank == STRAGGLER, 1.0, 0.0),
                          "wait_per_step_s": 7.5e-3 - cost, "cost_per_step_s": cost})
    dur = rng.normal(112e6, 2e4, ranks * STEPS).astype(np.int64)
    steps = pd.DataFrame({"rank": np.repeat(rank, STEPS), "window": 0, "step": step,
                          "start_ns": step * 112_000_000, "dur_ns": dur, "source": "profiler"})
    grouped = steps.groupby("rank")["dur_ns"]
    stats = pd.DataFrame({"rank": rank, "steps": STEPS, "median_s": grouped.median().to_numpy() / 1e9,
                          "p90_s": grouped.quantile(0.9).to_numpy() / 1e9, "min_s": grouped.min().to_numpy() / 1e9,
                          "max_s": grouped.max().to_numpy() / 1e9, "mean_s": grouped.mean().to_numpy() / 1e9,
                          "source": "profiler"})
    compute = rng.normal(71.0, 0.05, ranks)
    compute[STRAGGLER] = 78.0
    breakdown = pd.DataFrame({"rank": rank, "window": 0, "compute_pct": compute, "comm_exposed_pct": 99.9 - compute,
                              "memory_exposed_pct": 0.0, "idle_pct": 0.1, "overlap_pct": 0.0, "steps": STEPS,
                              "comm_ns": 160e6, "comm_overlapped_ns": 0.0, "comm_exposed_ns": 160e6})
    families = pd.DataFrame({"rank": np.repeat(rank, 2), "family": ["GEMM", "communication"] * ranks,
                             "share_pct": np.tile([80.0, 20.0], ranks)})
    host_of = {int(r): f"node-{int(r) // PER_HOST:03d}" for r in rank} if hosts else {}
    groups = group_ranks(list(rank), host_of)
    focus = focus_ranks(rank_measures(metrics, stats), host_of)
    shown = pick_ranks(list(rank), stats.set_index("rank")["median_s"], focus)  # as the timeline view picks them
    timeline = pd.DataFrame({"rank": np.repeat(shown, 2), "lane": ["GPU stream 7", "GPU stream 20"] * len(shown),
                             "kind": ["compute", "comm"] * len(shown), "name": ["gemm", "ncclAllReduce"] * len(shown),
                             "start_ms": 0.0, "dur_ms": 10.0})
    return {"rank_layout": layout(groups), "rank_groups": groups, "rank_focus": focus,
            "lateness_groups": binned(lateness, groups, "lateness_ms", "step"), "step_spread": spread_over_steps(steps),
            "breakdown": breakdown, "step_stats": stats, "steps": steps, "lateness": lateness, "rank_waits": waits,
            "kernel_families": families, "timeline": timeline}


def _render(tmp_path: Path) -> tuple[Path, str]:
    tables = _tables(RANKS, hosts=True)
    findings = [_straggler_finding(RANKS)]
    page = tmp_path / "report.html"
    html_report.render(page, findings, [], html_report.build_sections(tables, findings)[0], "4096 ranks")
    return page, page.read_text(encoding="utf-8")


def _straggler_finding(ranks: int) -> Finding:
    return Finding(analyzer="straggler", severity=Severity.WARNING, title=f"Rank {STRAGGLER} is a persistent straggler",
                   recommendation="Look at rank 1366.", ranks=(STRAGGLER,),
                   evidence={"victims": [{"rank": r, "wait_ms_per_step": 0.1} for r in range(ranks)]})


def test_a_4096_rank_report_is_small_binned_and_names_the_straggler(tmp_path: Path) -> None:
    # GIVEN the report views of 4096 ranks on 512 hosts, rank 1366 the straggler WHEN the report is rendered
    page, text = _render(tmp_path)
    # THEN it is under 5 MB
    assert page.stat().st_size < LIMIT, page.stat().st_size
    figures = json.loads(_FIGURES.search(text).group(1))  # type: ignore[union-attr]
    # AND lateness is a heatmap of at most 64 host groups (the 512 hosts merged), the straggler named in its hover
    heat = figures["fig-stragglers-0"]["data"][0]
    assert heat["type"] == "heatmap" and len(heat["y"]) <= MAX_GROUPS
    assert any(f"latest rank {STRAGGLER} " in cell for row in heat["hovertext"] for cell in row)
    # AND the waiting bars show the top-k ranks, the straggler first, not one bar per rank
    bars = figures["fig-stragglers-1"]["data"][0]
    assert bars["x"][0] == f"rank {STRAGGLER}" and len(bars["x"]) < 32
    # AND the per-rank breakdown is a distribution (boxes), the straggler an outlier point named in the hover
    boxes = figures["fig-breakdown-0"]["data"]
    assert {b["type"] for b in boxes} == {"box"} and f"rank {STRAGGLER}" in boxes[0]["hovertext"]
    # AND the timeline's title names the straggler and why it is shown
    title = figures["fig-timeline-0"]["layout"]["title"]["text"]
    assert f"slowest {STRAGGLER}, " in title and f"on {STRAGGLER}'s host 1363, 1364, 1365, 1367;" in title and "median" in title
    # AND no HTML table has more than 64 rows; cut tables name the parquet that holds every row
    assert max(t.count("<tr>") for t in _TABLE.findall(text)) <= 65
    assert "tables/breakdown.parquet" in text and "tables/step_stats.parquet" in text
    # AND the straggler is the first rank of the table of slowest ranks
    assert re.search(rf"<td>{STRAGGLER}</td><td>slowest #1</td>", text)


def test_rank_groups_follow_hosts_and_fall_back_to_rank_ranges() -> None:
    # GIVEN 4096 ranks with their hosts, 8 per host, and the same ranks without hosts
    ranks = list(range(RANKS))
    by_host = {r: f"node-{r // PER_HOST:03d}" for r in ranks}
    # WHEN grouped
    hosts, plain = group_ranks(ranks, by_host), group_ranks(ranks, {})
    # THEN 512 hosts become 64 groups of 8 consecutive hosts, labelled by their first and last host
    assert hosts["group"].nunique() == MAX_GROUPS
    assert hosts.loc[hosts["rank"] == 0, "group_label"].item() == "node-000 .. node-007 (8 hosts)"
    assert layout(hosts).iloc[0].to_dict() | {} == {"ranks": RANKS, "many": True, "threshold": 64, "groups": 64,
                                                   "grouped_by": "host", "largest_group": 64}
    # AND without hosts, 64 rank ranges of 64 ranks
    assert plain["group"].nunique() == MAX_GROUPS and plain.loc[plain["rank"] == 100, "group_label"].item() == "ranks 64-127"
    # AND a run of 8 hosts keeps one group per host; 64 ranks are not many
    few = group_ranks(list(range(64)), {r: f"h{r // 8}" for r in range(64)})
    assert few["group_label"].nunique() == 8 and not bool(layout(few)["many"].item())


def test_focus_ranks_are_the_slowest_their_peers_and_the_median() -> None:
    # GIVEN per-rank measures of 4096 ranks where rank 1366 makes the others wait
    tables = _tables(RANKS, hosts=False)
    focus = tables["rank_focus"]
    # THEN it is slowest #1, its rank neighbours (no hosts known) are its peers, and one median rank is listed
    assert focus.iloc[0][["rank", "role", "order"]].tolist() == [STRAGGLER, "slowest", 1]
    assert focus.loc[focus["role"] == "rank neighbour", "rank"].tolist() == [STRAGGLER - 1, STRAGGLER + 1]
    assert (focus["role"] == "median").sum() == 1 and (focus["role"] == "slowest").sum() == 10
    # AND the binned lateness names the straggler as its group's latest rank, in every step
    groups = tables["lateness_groups"]
    assert set(groups.loc[groups["max_ms"] > 2.0, "max_rank"]) == {STRAGGLER}
    assert len(groups) == MAX_GROUPS * STEPS


@pytest.mark.slow
@pytest.mark.browser
def test_a_4096_rank_report_reads_cleanly_in_a_browser(tmp_path: Path) -> None:
    # GIVEN the 4096-rank report WHEN opened in headless Chromium at a desktop's and a phone's width
    page, text = _render(tmp_path)
    charts = text.count('class="chart"')
    for size, name in ((DESKTOP, "desktop"), (NARROW, "narrow")):
        _, stderr, check = render_checked(page, tmp_path / f"profile-{name}", size, tmp_path / f"{name}.png")
        # THEN every chart draws, nothing is wider than the window, no console error, no empty section
        assert_reads_cleanly(check, stderr, charts)
