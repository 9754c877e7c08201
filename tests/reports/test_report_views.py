"""The report is drawn from views computed once per analysis, saved as plain tables, and redrawn from them alone."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from api_helpers import analyzed

from perftracker.analyzers.health import gpu_health, rdma, rdma_pfc, topology
from perftracker.analyzers.nccl import context
from perftracker.analyzers.stragglers import collectives, stack_profile, steps, straggler
from perftracker.analyzers.traces import cpu_ops, gpu_time, idle, kernels, merged_timeline
from perftracker.analyzers.views import REPORT_VIEWS
from perftracker.outputs import TABLES, render_report

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SAMPLE_RUNS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
_SECTION = re.compile(r'<section id="([^"]+)">\s*<h2>([^<]*)</h2>(.*?)</section>', re.S)
_FIGURES = re.compile(r'<script type="application/json" id="figures">(.*?)</script>', re.S)
_TAG = re.compile(r"</?(a|b|br|div|h[1-6]|li|ol|p|script|section|span|style|table|td|th|tr|ul)(\s[^<>]*)?/?>",
                  re.IGNORECASE)


def markup_in(table: Path) -> list[str]:
    """The text cells of a Parquet table that hold HTML markup."""
    frame = pd.read_parquet(table)
    return [str(v) for c in frame.columns if frame[c].dtype == object for v in frame[c] if _TAG.search(str(v))]


def sections_of(report: Path) -> list[tuple[str, str, int]]:
    """(id, title, number of figures) of every section of a report.html, in page order."""
    page = report.read_text(encoding="utf-8")
    figures = json.loads(_FIGURES.search(page).group(1))  # type: ignore[union-attr]
    return [(key, title, sum(1 for f in figures if f.startswith(f"fig-{key}-")))
            for key, title, _ in _SECTION.findall(page)]


@pytest.mark.parametrize("sample", SAMPLE_RUNS)
def test_report_rebuilds_every_section_from_tables_and_findings(tmp_path: Path, sample: str) -> None:
    # GIVEN a bundled sample run analyzed once
    out = tmp_path / "out"
    analyzed(SAMPLES / sample, out, cache=False, workers=1)
    first = sections_of(out / "report.html")
    # WHEN its report is rendered again from the output folder alone
    (out / "report.html").unlink()
    render_report(out)
    # THEN it has the same sections, with the same titles and as many figures each
    assert sections_of(out / "report.html") == first
    assert len(first) >= 3  # findings and at least two drawn sections
    # AND a sample with traces names its top CPU ops (and GPU kernels, the GPU one) in "Kernels and ops",
    # each with its full name in the row's title
    traced = (SAMPLES / sample / "traces").is_dir()
    assert (("kernels", "Kernels and ops") in {(key, title) for key, title, _ in first}) == traced
    page = (out / "report.html").read_text(encoding="utf-8")
    for view in ("ops", "kernels"):
        top = pd.read_parquet(out / TABLES / f"{view}.parquet")["name"].head(1)
        assert all(f'title="{html.escape(str(name))}"' in page for name in top)
    assert (sample == "synthetic-gpu-4rank-thermal") == (not pd.read_parquet(out / TABLES / "kernels.parquet").empty)
    assert traced == (not pd.read_parquet(out / TABLES / "ops.parquet").empty)
    # AND tables/ holds every report view as Parquet, no sections.json and nothing that is HTML
    stored = sorted(p.name for p in (out / TABLES).iterdir())
    assert stored == sorted(f"{name}.parquet" for name in REPORT_VIEWS)
    assert {p.name: markup_in(p) for p in (out / TABLES).iterdir()} == {name: [] for name in stored}


HEAVY: list[tuple[Any, str]] = [
    (gpu_time, "gpu_work"), (gpu_time, "breakdown"), (gpu_time, "breakdown_per_step"), (idle, "idle_gaps"),
    (merged_timeline, "pick_ranks"), (collectives, "aligned_arrivals"), (straggler, "rank_metrics"),
    (steps, "step_stats"), (gpu_health, "gpu_wide"), (rdma, "port_series"), (rdma_pfc, "pfc_series"),
    (context, "build_context"), (stack_profile, "rank_profiles"), (cpu_ops, "cpu_calls"), (kernels, "families"),
    (topology, "rank_map"),
]


def _counting(calls: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return counted


@pytest.mark.parametrize("sample", ["synthetic-gpu-4rank-thermal", "nccl-roce-2node-misconfig",
                                    "attach-4rank-slow-rank2"])
def test_every_heavy_computation_runs_once_per_analyze(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       sample: str) -> None:
    # GIVEN the heavy computations behind the findings and the figures, counted
    calls: Counter[str] = Counter()
    for module, name in HEAVY:
        monkeypatch.setattr(module, name, _counting(calls, name, getattr(module, name)))
    # WHEN a sample run that exercises breakdown, stragglers, GPU and RDMA series, NCCL context and
    # sampled stacks is analyzed end to end (findings, report views, report)
    result = analyzed(SAMPLES / sample, tmp_path / "out", cache=False, workers=1)
    assert result.findings
    # THEN each ran exactly once, shared by the analyzers and the report
    expected = {name: 1 for _, name in HEAVY}
    if sample != "synthetic-gpu-4rank-thermal":  # no profiler steps: no timeline to pick ranks for
        expected.pop("pick_ranks")
    assert dict(calls) == expected
