"""report.html renders in headless Chromium: every chart draws and the console has no errors.

A browser launch costs seconds, so the browser sees each bundled sample once, a few chart-heavy shared
traces and one trace of each shape of the shared corpus (AMD, MTIA, CPU-only, critical-path, Triton,
execution trace, no ProfilerStep, odd metadata); every other shared trace set is analyzed end to end
and its report checked without a browser (`static_charts`: every chart has a figure with data in the
report's figures JSON, which is what the page's script draws). A report redrawn by `perftracker
report` is compared with the first one as text: the same page draws the same charts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape, unescape
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from api_helpers import analyzed

from perftracker.outputs import render_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000"]


def render_dom(html: Path, profile: Path) -> tuple[str, str]:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: install Debian's chromium (CI does)")
    result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", html.as_uri()],
                            capture_output=True, text=True, timeout=120)
    return result.stdout, result.stderr


DESKTOP, NARROW = (1366, 900), (390, 844)
# Headless Chromium never makes its window narrower than 500 px: the "narrow" check runs at 500, the
# narrowest the browser gives (the page's own breakpoint is 760 px, so it is the phone layout either way).
# The windows are made taller than the screen so that each screenshot shows the whole page's charts.
SCREEN_HEIGHT = 5000


def render_checked(html: Path, profile: Path, size: tuple[int, int], screenshot: Path) -> tuple[str, str, dict[str, Any]]:
    """One browser launch: the page opened as report.html?layout-check at `size`'s width, its DOM, the console
    log, the PNG in `screenshot`, and what the page's own check found (`#layout-check`: viewport and page
    widths, the elements wider than the window, each chart's drawing, sections with nothing in them)."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: install Debian's chromium (CI does)")
    result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--hide-scrollbars",
                             f"--window-size={size[0]},{SCREEN_HEIGHT}", f"--screenshot={screenshot}", "--dump-dom",
                             html.as_uri() + "?layout-check"], capture_output=True, text=True, timeout=120)
    match = re.search(r'<pre id="layout-check">(.*?)</pre>', result.stdout, re.S)
    assert match, "the page did not run its layout check (the charts script stopped before drawing?)"
    return result.stdout, result.stderr, json.loads(unescape(match.group(1)))


def assert_reads_cleanly(check: dict[str, Any], stderr: str, charts: int) -> None:
    """No console error, nothing wider than the window, every chart drawn with something plotted, no empty section."""
    assert console_errors(stderr) == []
    assert check["page"] <= check["viewport"] and check["too_wide"] == [], check["too_wide"]
    assert len(check["charts"]) == charts
    assert [c["id"] for c in check["charts"] if not c["svg"] or not c["plotted"]] == []
    assert all(c["width"] <= check["viewport"] for c in check["charts"])
    assert check["empty_sections"] == []


def static_charts(html: str) -> int:
    """The number of chart divs, after checking each has a figure with at least one trace in the figures JSON."""
    ids = re.findall(r'class="chart" id="([^"]+)"', html)
    match = re.search(r'<script type="application/json" id="figures">(.*?)</script>', html, re.S)
    figures = json.loads(match.group(1)) if match else {}
    assert sorted(figures) == sorted(ids), "every chart div needs its figure and no figure may be orphaned"
    for fid in ids:
        assert figures[fid].get("data"), f"figure {fid} has no traces"
    return len(ids)


def _without_time(html: str) -> str:
    return re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", "<time>", html)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "error" in line)]


@pytest.mark.slow
@pytest.mark.parametrize("trace_set", ["trace_filter", "df_index_resolver", "cpu_only"])
def test_every_chart_renders_without_console_errors(hta_traces: Path, tmp_path: Path, trace_set: str) -> None:
    result = analyzed(hta_traces / trace_set, tmp_path / "out", cache=False, workers=1)
    html = result.report_path.read_text()
    expected = html.count('class="chart"')
    dom, stderr = render_dom(result.report_path, tmp_path / "profile")
    assert dom.count('class="plot-container plotly"') == expected
    assert expected >= (1 if trace_set == "cpu_only" else 4)
    assert console_errors(stderr) == []
    assert result.report_path.stat().st_size < 10 * 1024 * 1024
    # AND the drawn page names the top CPU ops and, for GPU traces, the top kernels in full (a row's title)
    # with the kernel chart drawn, and shows each finding's evidence as a table
    assert 'id="kernels"' in dom and 'class="named"' in dom
    if trace_set != "cpu_only":
        top = pd.read_parquet(result.out_dir / "tables" / "kernels.parquet")["name"].iloc[0]
        titles = {f'title="{escape(top)}"', 'title="' + top.replace("&", "&amp;").replace('"', "&quot;") + '"'}
        assert any(t in dom for t in titles) and "Top GPU kernels across ranks" in dom  # either DOM serialization
    assert dom.count('<details class="evidence">') == sum(1 for f in result.findings if f.evidence)


SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.slow
@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_sample_run_report_renders(tmp_path: Path, sample: str) -> None:
    # GIVEN each bundled sample run WHEN analyzed and its report opened in a browser
    result = analyzed(SAMPLES / sample, tmp_path / "out", cache=False, workers=1)
    dom, stderr, check = render_checked(result.report_path, tmp_path / "profile", DESKTOP, tmp_path / "desktop.png")
    # THEN every chart draws and the console has no errors
    charts = result.report_path.read_text().count('class="chart"')
    assert charts >= 1 and dom.count('class="plot-container plotly"') == charts
    assert_reads_cleanly(check, stderr, charts)
    assert (tmp_path / "desktop.png").stat().st_size > 10_000
    # AND at a phone's width too: nothing wider than the window (wide tables scroll in their own box), every
    # chart drawn within it, no empty section
    _, narrow_stderr, narrow = render_checked(result.report_path, tmp_path / "profile-narrow", NARROW,
                                              tmp_path / "narrow.png")
    assert narrow["viewport"] < 800
    assert_reads_cleanly(narrow, narrow_stderr, charts)
    # AND the summary strip comes before the findings, with the step time where the run has steps
    assert dom.index('id="summary"') < dom.index('id="findings"')
    assert ('id="summary-step"' in dom) == (result.tables["run_summary"]["step_ranks"].iloc[0] > 0)
    if sample == "attach-4rank-slow-rank2":
        # AND the sampled-stack section shows the frames
        assert 'id="profile"' in dom and "SlowableMLP.forward (sample_job.py:93)" in dom
    # AND a sample whose manifest names synthetic inputs shows the banner saying so; a real one does not
    synthetic = "synthetic" in json.loads((SAMPLES / sample / "manifest.json").read_text())
    assert ('id="synthetic"' in dom) == synthetic
    if synthetic:
        assert "Synthetic inputs." in dom
    # AND every finding's evidence is a table, not raw JSON; a traced run names its ops
    assert dom.count('<table class="evidence">') == sum(1 for f in result.findings if f.evidence)
    assert ('id="kernels"' in dom) == (SAMPLES / sample / "traces").is_dir()
    # AND the report redrawn from tables/ and findings.json alone is the same page (so it draws the same
    # charts as cleanly), whatever the time it was drawn
    first = result.report_path.read_text()
    result.report_path.unlink()
    render_report(result.out_dir)
    assert _without_time(result.report_path.read_text()) == _without_time(first)


TRACE_SETS = ["amd_trace", "call_stack", "cpu_only", "critical_path/alexnet", "critical_path/cuda_event_sync",
              "critical_path/cuda_event_sync_multi_stream", "critical_path/simple_add", "cupti_profiler",
              "distributed_info_unavailable", "execution_trace", "mixed_files", "mtia_inference_trace",
              "nccl_parser_config", "negative_queue_length_values_check", "ns_resolution_trace", "rank_non_gpu",
              "rank_unavailable", "timeline_analysis", "trace_compare/base", "trace_diff/test", "trace_file_list",
              "triton_example", "with_gpu_user_annotation"]


# one of each shape goes through the browser (trace_filter, df_index_resolver and cpu_only are drawn above)
IN_BROWSER = {"amd_trace", "critical_path/alexnet", "execution_trace", "mtia_inference_trace", "rank_non_gpu",
              "triton_example", "with_gpu_user_annotation"}


@pytest.mark.slow
@pytest.mark.parametrize("trace_set", TRACE_SETS)
def test_analyze_every_shared_trace_set_and_render(hta_traces: Path, tmp_path: Path, trace_set: str) -> None:
    # GIVEN any trace set of the shared corpus (GPU, AMD, MTIA, CPU-only, odd metadata)
    # WHEN analyzed end to end
    result = analyzed(hta_traces / trace_set, tmp_path / "out", cache=False, workers=1)
    # THEN there are findings (at least the summary or the input notes) and every chart has its figure
    assert result.findings
    charts = static_charts(result.report_path.read_text())
    # AND, for one trace set of each shape, the report renders cleanly in the browser
    if trace_set in IN_BROWSER:
        dom, stderr = render_dom(result.report_path, tmp_path / "profile")
        assert dom.count('class="plot-container plotly"') == charts
        assert console_errors(stderr) == []
