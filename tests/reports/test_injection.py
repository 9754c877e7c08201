"""Nothing from the inputs is ever markup or a terminal command: hostile names (`<a href=...>`, `<span
style=...>`, ESC sequences) in traces, step files and output folders reach plotly only as text, are
escaped in report.html (also when `perftracker report` redraws a tampered output folder), and reach the
terminal and `--summary` without control characters."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner

from perftracker.analyzers.analysis import Analysis
from perftracker.cli import app
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.pipeline import analyze
from perftracker.reports import html as html_report
from perftracker.reports.charts import label, safe_figure
from perftracker.reports.text import text_summary

LINK = '<a href="https://evil.example/x">click</a>'
SPAN = '<span style="font-size:80px;color:red">big</span>'
ESC = "\x1b[31m\x1b]0;owned\x07\x9b2J"
HOSTILE = f"{LINK}{SPAN}{ESC}"
SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
_FIGURES = re.compile(r'<script type="application/json" id="figures">(.*?)</script>', re.S)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def hostile_run(run: Path) -> Path:
    """4 ranks of traces and step files whose kernel, device, phase and host names are hostile; rank 2 is
    5x slower in its hostile phase, so that name is in the verdict."""
    for rank in range(4):
        b = TraceBuilder(rank=rank, world_size=4)
        for n in range(3):
            t0 = n * 10000
            b.step(n + 1, t0, 10000).kernel(f"gemm{HOSTILE}", t0 + 10, 3000, launch_ts=t0 + 1)
            b.kernel(f"ncclKernel_AllReduce{HOSTILE}", t0 + 8000, 1500, launch_ts=t0 + 2)
        doc = b.document()
        doc["deviceProperties"] = [{"id": 0, "name": f"GPU{HOSTILE}", "totalGlobalMem": 1}]
        (run / "traces").mkdir(parents=True, exist_ok=True)
        (run / "traces" / f"rank-{rank}.pt.trace.json").write_text(json.dumps(doc))
        forward = 50_000_000 if rank == 2 else 10_000_000
        lines = [json.dumps({"rank": rank, "step": s, "start_ns": 1_700_000_000_000_000_000 + s * 100_000_000,
                             "end_ns": 1_700_000_000_000_000_000 + s * 100_000_000 + 60_000_000 + forward,
                             "host": f"node{HOSTILE}",
                             "phases_ns": {f"fwd{HOSTILE}": forward + s * 1000, "backward": 50_000_000 + s}})
                 for s in range(30)]
        (run / "steps").mkdir(exist_ok=True)
        (run / "steps" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    return run


def raw_markup(value: Any, where: str = "") -> list[str]:
    """Every string of a figure (data, layout) that still holds a raw `<` or `>`: plotly would read it as markup."""
    if isinstance(value, str):
        return [f"{where}: {value[:80]}"] if "<" in value or ">" in value else []
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in raw_markup(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [hit for v in value for hit in raw_markup(v, where)]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return raw_markup(value.tolist(), where)
    return []


def page_figures(report: Path) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(_FIGURES.search(report.read_text())[1])  # type: ignore[index]
    return figures


def assert_no_live_markup(report: Path) -> None:
    page = report.read_text()
    assert '<a href="https://evil' not in page and "<span style=" not in page
    assert raw_markup(page_figures(report)) == []


def test_hostile_names_are_text_in_the_report_terminal_and_summary(tmp_path: Path) -> None:
    # GIVEN a run whose kernel, device, phase and host names carry plotly/HTML markup and ESC sequences
    run = hostile_run(tmp_path / "run")
    # WHEN it is analyzed
    result = CliRunner().invoke(app, ["analyze", str(run), "-o", str(tmp_path / "out"), "--no-cache", "--workers", "1"])
    # THEN the verdict names the slow rank on the terminal, without a single control character (which of its
    # findings, its slow hostile-named phase or its slow steps, tops the verdict follows their replayed costs)
    assert result.exit_code == 0, result.output
    assert "Rank 2" in result.stdout and _CONTROL.findall(result.stdout) == []
    titles = [f["title"] for f in json.loads((tmp_path / "out" / "findings.json").read_text())["findings"]]
    assert any(t.startswith("Rank 2 spends") and "evil.example" in t for t in titles), titles
    # AND the report shows those names as text: no live link, no styled span, no raw markup in any figure
    assert_no_live_markup(tmp_path / "out" / "report.html")
    assert "evil.example" in json.dumps(page_figures(tmp_path / "out" / "report.html"))  # shown, as text
    # AND the chat/ticket summary holds the names but no control character either
    summary = text_summary(json.loads((tmp_path / "out" / "findings.json").read_text()))
    assert "Rank 2" in summary and _CONTROL.findall(summary) == []
    # AND redrawing that output folder, with hostile text planted in its findings.json too, keeps it all text
    doc = json.loads((tmp_path / "out" / "findings.json").read_text())
    doc["findings"][0].update(title=f"<script>alert(1)</script>{HOSTILE}", recommendation=LINK)
    doc["notes"].append({"level": "warning", "source": LINK, "message": SPAN, "data": {}})
    (tmp_path / "out" / "findings.json").write_text(json.dumps(doc))
    redrawn = CliRunner().invoke(app, ["report", str(tmp_path / "out")])
    assert redrawn.exit_code == 0, redrawn.output
    assert_no_live_markup(tmp_path / "out" / "report.html")
    assert "<script>alert(1)" not in (tmp_path / "out" / "report.html").read_text()


def _tamper(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Every text column, and the GPU, window and step labels, made hostile (consistently across tables)."""
    out = {}
    for name, frame in tables.items():
        frame = frame.copy()
        for column in frame.columns:
            dtype = frame[column].dtype
            text = pd.api.types.is_string_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype)
            if text or column in ("gpu", "window") or (name == "lateness" and column == "step"):
                frame[column] = [f"{v}{HOSTILE}" for v in frame[column]]
        out[name] = frame
    return out


@pytest.fixture(scope="module")
def sample_tables() -> dict[str, pd.DataFrame]:
    """The report views of the samples that between them fill every chart (GPU, RDMA, PFC, stacks, traces)."""
    merged: dict[str, pd.DataFrame] = {}
    for sample in ("synthetic-gpu-4rank-thermal", "nccl-roce-2node-misconfig", "attach-4rank-slow-rank2"):
        _, tables, _ = analyze(Analysis(load_path(SAMPLES / sample, LoadOptions(workers=1, cache_dir=None))))
        merged.update({k: v for k, v in tables.items() if not v.empty and k not in merged})
    return merged


def test_every_chart_labels_what_came_from_an_output_folder(sample_tables: dict[str, pd.DataFrame],
                                                            tmp_path: Path) -> None:
    # GIVEN the report tables of real samples (every chart has data) with every label in them made hostile,
    # as a tampered output folder would hold them
    tables = _tamper(sample_tables)
    # WHEN every section is built
    sections = html_report.build_sections(tables, [])[0]
    # THEN every chart drew, and not one string of any figure holds raw markup, even before the page's net
    keys = {s.key for s in sections if s.figures}
    assert {"breakdown", "steps", "stragglers", "timeline", "gpu", "rdma", "profile"} <= keys
    assert {s.key: [hit for f in s.figures for hit in raw_markup(f)] for s in sections} == {s.key: [] for s in sections}
    # AND the page drawn from them holds no live markup
    html_report.render(tmp_path / "report.html", [], [], sections, title=LINK)
    assert_no_live_markup(tmp_path / "report.html")


def test_the_page_net_makes_any_raw_markup_text_and_leaves_labels_alone() -> None:
    # GIVEN a figure where a chart forgot `label` in places, and used it in others
    figure = {"data": [{"name": LINK, "x": np.array([SPAN, "rank 1"], dtype=object), "y": [1, 2],
                        "hovertext": [label(LINK)], "marker": {"color": "#4C78A8"}}],
              "layout": {"title": {"text": f"GPUs on {SPAN}"}, "annotations": [{"text": label(SPAN)}]}}
    # WHEN the page makes it safe
    safe = safe_figure(figure)
    # THEN no raw markup is left, what was labelled is unchanged, and the rest is as it was
    assert raw_markup(safe) == []
    assert safe["data"][0]["hovertext"] == [label(LINK)] and safe["layout"]["annotations"][0]["text"] == label(SPAN)
    assert safe["data"][0]["name"] == label(LINK) and safe["data"][0]["x"][1] == "rank 1"
    assert safe["data"][0]["y"] == [1, 2] and safe["data"][0]["marker"] == {"color": "#4C78A8"}
