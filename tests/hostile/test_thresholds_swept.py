"""Round three: every threshold at both ends of its declared range, on the samples (sample_traces/): no analyzer
and no report view fails. The probe: `--set degradation.min_steps=1` (legal) made the degradation analyzer fail
("attempt to get argmin of an empty sequence").

The sweep is grouped to keep it fast: one analysis with every threshold at the low end of its range, one with
every threshold at the high end (an open end is approached within 1e-6, or one for counts; an unbounded one is
10^9), per sample, each sample loaded once (the two samples with traces take ~10 s each here)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.registry import run_analyzers
from perftracker.analyzers.thresholds import DECLARED, UNITS, Number, Thresholds
from perftracker.analyzers.views import report_tables
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def end_of_range(name: str, high: bool) -> Number:
    """The lowest or highest value `--set` accepts for threshold `name`."""
    unit = UNITS[DECLARED[name].unit]
    step = 1 if unit.whole else 1e-6
    if high:
        value = (unit.high - step if unit.open_high else unit.high) if math.isfinite(unit.high) else 1e9
    else:
        value = unit.low + step if unit.open_low else unit.low
    return int(value) if unit.whole else float(value)


def test_the_ends_are_accepted_by_the_command_line_checks() -> None:
    for high in (False, True):
        table = Thresholds.with_overrides({n: end_of_range(n, high) for n in DECLARED})
        assert len(table.overrides) == len(DECLARED)


_STORES: dict[str, Store] = {}


def _store(sample: str) -> Store:
    if sample not in _STORES:
        _STORES[sample] = load_path(SAMPLES / sample, LoadOptions(cache_dir=None, workers=1))
    return _STORES[sample]


CASES = [pytest.param(s, high, id=f"{s}-{'high' if high else 'low'}")
         for s in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()) for high in (False, True)]


@pytest.mark.parametrize(("sample", "high"), CASES)
def test_no_analyzer_fails_with_every_threshold_at_an_end_of_its_range(sample: str, high: bool) -> None:
    # GIVEN a sample, and every threshold at the low (or high) end of its declared range
    analysis = Analysis(_store(sample), AnalysisOptions(thresholds={n: end_of_range(n, high) for n in DECLARED}))
    # WHEN every analyzer runs and every report view is computed
    found = run_analyzers(analysis)
    failed: dict[str, Exception] = {}
    report_tables(analysis, failed)
    # THEN none failed
    assert [f.title for f in found if f.title.startswith("Analyzer '") and "failed" in f.title] == []
    assert {k: repr(v) for k, v in failed.items()} == {}
