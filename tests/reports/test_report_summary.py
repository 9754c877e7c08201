"""The top of report.html: the summary strip, the verdict, and the command that writes the run's timeline.

Promise checked: the `run_summary` view (analyzers) gives ranks, hosts, step time and the fastest and
slowest rank's median step, with no spread across ranks for a single rank; the strip shows them with the
biggest cost and its share before the findings, and findings.json's summary carries the same step spread
and biggest cost; the report's `perftracker timeline` line is a command that works as written: run from
where analyze ran, it writes the merged trace of the run's ranks. Inputs: a real recorded 4-rank run whose
rank 2 does 5x the forward work (and one of its traces alone, for a single-rank run).
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
from api_helpers import analyzed
from typer.testing import CliRunner

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.coverage import run_summary_view
from perftracker.analyzers.stragglers.steps import analyze_steps
from perftracker.cli import app
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.reports.charts import step_time_chart
from perftracker.reports.evidence import number
from perftracker.reports.html import summary_strip

REPO = Path(__file__).resolve().parents[2]
SLOWED = REPO / "tests" / "fixtures" / "accuracy" / "inproc-rank2-x5-16"


def test_a_single_rank_has_no_spread_across_ranks() -> None:
    # GIVEN one rank's trace alone WHEN its run summary is computed
    analysis = Analysis(load_path(SLOWED / "traces" / "rank-0.pt.trace.json.gz", LoadOptions(workers=1)))
    row = run_summary_view(analysis).iloc[0]
    # THEN it has a step time and one rank, and no fastest/slowest rank to tell apart
    assert row["ranks"] == 1 and row["step_ranks"] == 1 and row["step_median_s"] > 0
    assert pd.isna(row["step_fastest_rank_s"]) and pd.isna(row["step_slowest_rank_s"])
    # AND the strip says "one rank" with its p90, never "spread across ranks"
    step = summary_strip({"run_summary": pd.DataFrame([row])}, [])[0]
    assert step.key == "step" and step.detail.startswith("one rank; p90 ") and "across ranks" not in step.detail
    # AND so does the step-time finding (never "spread across ranks 0 us")
    titles = [f.title for f in analyze_steps(analysis)]
    assert titles and titles[0].startswith("Step time") and not any("across ranks" in t for t in titles)


def test_the_strip_leaves_out_what_was_not_measured() -> None:
    # GIVEN a run with neither steps nor findings with a cost (e.g. only NCCL logs of 2 hosts)
    run = pd.DataFrame([{"ranks": 8, "hosts": 2, "host_names": "a, b", "step_ranks": 0, "step_median_s": float("nan"),
                         "step_p90_s": float("nan"), "step_fastest_rank_s": float("nan"),
                         "step_slowest_rank_s": float("nan"), "step_source": ""}])
    # WHEN the strip is laid out THEN it shows ranks and hosts only: no "0 ms" step, no cost cell
    cells = summary_strip({"run_summary": run}, [])
    assert [(c.key, c.value) for c in cells] == [("ranks", "8"), ("hosts", "2")] and cells[1].detail == "a, b"
    # AND an output folder from before the view existed has no strip at all, without failing
    assert summary_strip({}, []) == []


def test_report_top_and_its_timeline_command_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the real slowed 4-rank run analyzed with a relative -o
    monkeypatch.chdir(tmp_path)
    result = analyzed(SLOWED, Path("out"), cache=False, workers=1)
    html = result.report_path.read_text()
    summary = result.document["summary"]
    # THEN the strip (step time with its spread across 4 ranks, ranks, hosts, biggest cost) precedes the findings
    strip = html[html.index('id="summary"'):html.index('id="findings"')]
    assert "Step time" in strip and "median over 4 ranks; spread across ranks" in strip
    assert re.search(r'id="summary-ranks"><div class="label">Ranks</div><div class="value">4<', strip)
    top = summary["biggest_cost"]
    assert top is not None and top["seconds_per_step"] == round(max(f.cost.seconds_per_step for f in result.findings), 9)
    assert "Biggest cost" in strip and f"({number(top['share_of_step'], 'share')} of the step)" in strip
    # AND findings.json's summary has the same spread as the view
    row = result.tables["run_summary"].iloc[0]
    assert summary["step_spread_across_ranks_s"] == row["step_slowest_rank_s"] - row["step_fastest_rank_s"] > 0
    # AND the timeline line is a command that, run as written, writes the merged trace of the 4 ranks
    line = re.search(r'id="timeline-command">[^<]*<code>([^<]+)</code>', html)
    assert line is not None
    argv = shlex.split(unescape(line.group(1)))
    assert argv[:2] == ["perftracker", "timeline"] and argv[-2:] == ["-o", "out/timeline.json.gz"]
    ran = CliRunner().invoke(app, [*argv[1:], "--no-cache"])
    assert ran.exit_code == 0, ran.output
    trace = json.loads(gzip.decompress(Path("out/timeline.json.gz").read_bytes()))
    names = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names == {0, 1, 2, 3}


def test_the_step_chart_bar_goes_up_to_p90_only() -> None:
    # GIVEN per-rank step stats WHEN charted
    stats = pd.DataFrame({"rank": [0, 1], "median_s": [0.039, 0.041], "p90_s": [0.052, 0.054]})
    error = step_time_chart(stats)["data"][0]["error_y"]  # type: ignore[index]
    # THEN the bar reaches from the median up to the p90, and nothing is drawn below the median (it is no p10)
    assert error["symmetric"] is False and error["arrayminus"] == [0.0, 0.0]
    assert error["array"] == pytest.approx([13.0, 13.0])


def test_analyze_with_timeline_writes_it_beside_the_report_and_links_it(tmp_path: Path) -> None:
    # GIVEN the real slowed 4-rank run WHEN it is analyzed with the timeline asked for
    result = analyzed(SLOWED, tmp_path / "out", cache=False, workers=1, timeline=True)
    html = result.report_path.read_text()
    # THEN timeline.json.gz lies beside report.html, every rank a process, the straggler's late arrivals marked
    trace = json.loads(gzip.decompress((tmp_path / "out" / "timeline.json.gz").read_bytes()))
    names = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names == {0, 1, 2, 3}
    assert any(e.get("ph") == "i" and e.get("cat") == "perftracker" for e in trace["traceEvents"])
    # AND the report links it by its relative name (the command line is kept for other selections)
    link = re.search(r'id="timeline-link">[^<]*<a href="([^"]+)"', html)
    assert link is not None and link.group(1) == "timeline.json.gz"
    assert 'id="timeline-command"' not in html
    # AND without the flag no timeline is written and the report shows the command instead
    plain = analyzed(SLOWED, tmp_path / "plain", cache=False, workers=1)
    assert not (tmp_path / "plain" / "timeline.json.gz").exists()
    assert 'id="timeline-command"' in plain.report_path.read_text()
