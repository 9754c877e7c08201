"""Costs that add up, on every real trace of the shared corpus and every sample run.

No finding's cost share exceeds 100% (nor any "N% of the step" in a title), and the GPU time
breakdown sums to 100% per rank, under perftracker's and HTA's definitions, over the window and over
each cost period. One analysis per trace set.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import HTA_TRACES, ROOT, corpus_store

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.traces.gpu_time import breakdown, breakdown_view
from perftracker.analyzers.traces.period_costs import period_costs_view

SHARES = ["compute_pct", "comm_exposed_pct", "wait_exposed_pct", "memory_exposed_pct", "idle_pct"]
_PERCENT_OF = re.compile(r"(\d+(?:\.\d+)?)% of the (?:step|iteration|window)")


def _corpus() -> list[str]:
    """Every folder of the shared HTA corpus holding a trace (HTA's expected outputs and output folders
    aside), and every sample run."""
    sets = []
    if HTA_TRACES.is_dir():
        folders = {p.parent for p in HTA_TRACES.rglob("*.json*")}
        sets += sorted(f"hta/{f.relative_to(HTA_TRACES)}" for f in folders
                       if "expected_hta" not in f.parts and f.name != "output")
    sets += sorted(f"samples/{p.name}" for p in (ROOT / "sample_traces").iterdir() if p.is_dir())
    return sets


def _path(name: str) -> Path:
    kind, rest = name.split("/", 1)
    return HTA_TRACES / rest if kind == "hta" else ROOT / "sample_traces" / rest


@pytest.mark.parametrize("name", _corpus())
def test_no_cost_share_exceeds_100_percent_and_breakdowns_sum_to_100(name: str) -> None:
    # GIVEN one trace set of the corpus, analyzed once
    store = corpus_store(_path(name))
    analysis = Analysis(store)
    findings = costed_findings(analysis)
    # THEN no finding costs more than its step, in its cost or in its title
    for finding in findings:
        assert 0.0 <= finding.cost.share_of_step <= 1.0 + 1e-9, (finding.key, finding.cost)
        assert all(float(p) <= 100.0 for p in _PERCENT_OF.findall(finding.title)), finding.title
    assert not [f.title for f in findings if f.title.startswith("Analyzer '")]  # no analyzer crashed
    # AND the breakdown sums to 100% per rank window, by both definitions
    for table in (breakdown(store, hta_compat=False), breakdown(store, hta_compat=True),
                  analysis.view(breakdown_view)):  # the last with waiting told apart from transfer
        if not table.empty:
            assert (table[SHARES].sum(axis=1) - 100.0).abs().max() < 1e-6
    # AND inside every cost period the parts add up to the period
    costs = analysis.view(period_costs_view)
    if not costs.empty:
        parts = (costs["compute_ns"] + costs["comm_exposed_ns"] + costs["wait_exposed_ns"]
                 + costs["memory_exposed_ns"] + costs["idle_ns"])
        assert (parts == costs["dur_ns"]).all()
        assert (costs["idle_ns"] >= 0).all() and (costs["memory_exposed_ns"] >= 0).all()
