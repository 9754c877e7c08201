"""Pipeline diagnoses on real recorded jobs: 2 stages x 2 replicas under torchrun with gloo (tests/fixtures/pipeline_gloo,
scripts/record_pipeline_runs.py): stage imbalance named with its stage, share and cost; the slow worker named with
its stage and its victims as evidence (one finding); the schedule recognized; clean runs quiet.

The full false-warning rate is measured on all 10 clean runs with every analyzer and finding pass; the pipeline and
straggler analyzers alone are also checked on three clean runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from perftracker import api
from perftracker.analyzers.findings import Finding, Severity
from perftracker.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pipeline_gloo"


def _store(case: str) -> Iterator[Store]:
    with api.load(FIXTURES / case, cache=False) as store:
        yield store


@pytest.fixture(scope="module")
def imbalance() -> Iterator[Store]:
    yield from _store("imbalance/traces")


@pytest.fixture(scope="module")
def slow_worker() -> Iterator[Store]:
    yield from _store("slow_worker/traces")


def _loud(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity >= Severity.WARNING]


def test_stage_imbalance_is_named_with_its_stage_share_and_cost(imbalance: Store) -> None:
    """GIVEN the real job whose last stage holds 8 hidden layers against the first stage's 3 (~2.7x)
    WHEN the pipeline and straggler analyzers run
    THEN the one loud finding is the pipeline's: stage 1 (ranks 2, 3) holds most of the compute, a balanced split
    shortens the step (its cost), ~2-3 layers should move to stage 0, the stage-0 ranks' receive waits are its
    evidence, and where each rank sits is said."""
    findings = api.judge(imbalance, ["pipeline", "straggler"])
    loud = _loud(findings)
    assert [f.analyzer for f in loud] == ["pipeline"], [f.title for f in loud]
    f = loud[0]
    assert f.ranks == (2, 3) and f.evidence["heavy_stage"] == 1
    assert "Stage 1" in f.title
    assert f.evidence["stage_compute_share"][1] >= 0.65  # 8 + head against 3 layers
    assert f.cost.seconds_per_step > 0 and f.cost.share_of_step >= 0.05
    assert f.evidence["balanced_step_ms"] < f.evidence["step_ms"]
    assert 2 <= f.evidence["move_layers"] <= 4 and f.evidence["move_to_stage"] == 0
    assert f.evidence["recv_wait_share_by_stage"][0] > 0.3  # stage 0 blocked in recv much of each step
    assert f.evidence["schedule"] == "1f1b" and f.evidence["microbatches"] == 4
    assert (f.confidence or 0) >= 0.99
    assert f.evidence["positions"] == ["rank 2: stage 1, replica 0", "rank 3: stage 1, replica 1"]


def test_slow_worker_named_with_its_stage_and_victims(slow_worker: Store) -> None:
    """GIVEN the real job whose rank 1 (stage 0, replica 1) runs 2 extra forward passes per micro-batch
    WHEN the pipeline and straggler analyzers run
    THEN one loud finding names rank 1 and its place, and lists as victims its pipeline successor (rank 3, waiting
    in receives) and its data-parallel peer (rank 0, waiting in the gradient all-reduce); no stage imbalance and no
    finding of its own for a victim."""
    findings = api.judge(slow_worker, ["pipeline", "straggler"])
    loud = _loud(findings)
    assert len(loud) == 1 and loud[0].analyzer == "straggler", [f.title for f in loud]
    f = loud[0]
    assert f.ranks == (1,) and "(stage 0, replica 1)" in f.title
    assert f.evidence["position"] == "rank 1: stage 0, replica 1"
    victims = {v["rank"]: v for v in f.evidence["victims"]}
    assert victims[3]["role"] == "pipeline successor" and victims[3]["wait_ms_per_step"] > 0
    assert victims[0]["role"] == "data-parallel peer" and victims[0]["wait_ms_per_step"] > 0
    assert not any(f.analyzer == "pipeline" and "imbalance" in f.key for f in findings)


def test_gpipe_schedule_recognized() -> None:
    """GIVEN the real job run with the GPipe schedule WHEN the pipeline analyzer runs
    THEN its summary names GPipe, 4 micro-batches and the ideal bubble 1/5, and nothing is loud."""
    with api.load(FIXTURES / "gpipe" / "traces", cache=False) as store:
        findings = api.judge(store, ["pipeline"])
    summary = next(f for f in findings if f.key == "pipeline:summary")
    assert summary.evidence["schedule"] == "gpipe" and summary.evidence["microbatches"] == 4
    assert summary.evidence["ideal_bubble"] == pytest.approx(0.2)
    assert _loud(findings) == []


@pytest.mark.parametrize("run", ["run-00", "run-04", "run-07"])
def test_clean_runs_quiet(run: str) -> None:
    """GIVEN a clean run of the job (balanced stages, nobody slowed; recorded under load)
    WHEN the pipeline and straggler analyzers run THEN nothing is a warning or above; the schedule is 1F1B."""
    with api.load(FIXTURES / "clean" / run, cache=False) as store:
        findings = api.judge(store, ["pipeline", "straggler"])
    assert _loud(findings) == [], [f.title for f in _loud(findings)]
    assert next(f for f in findings if f.key == "pipeline:summary").evidence["schedule"] == "1f1b"


def test_clean_runs_false_warning_rate() -> None:
    """GIVEN all 10 clean runs WHEN fully analyzed (every analyzer and every finding pass, as `analyze` does; its
    report views are not needed) THEN none names a problem (warning or above): the false-warning rate on clean
    pipeline runs is 0 of 10."""
    from perftracker.analyzers.analysis import Analysis
    from perftracker.pipeline import findings_of

    noisy = {}
    for i in range(10):
        with api.load(FIXTURES / "clean" / f"run-{i:02d}", cache=False) as store:
            loud = _loud(findings_of(Analysis(store)))
        if loud:
            noisy[i] = [f.title for f in loud]
    assert noisy == {}


def test_layout_grid_section_shows_the_heavy_stage(imbalance: Store) -> None:
    """GIVEN the imbalance job's layout_grid view WHEN the report's layout section renders it
    THEN it draws a replica x stage heatmap of 2 x 2 workers whose stage-1 column is the hotter one."""
    from perftracker.analyzers.analysis import Analysis
    from perftracker.analyzers.pipeline.views import layout_grid_view
    from perftracker.reports.trace_sections import layout_section

    grid = Analysis(imbalance).view(layout_grid_view)
    assert sorted(zip(grid["rank"], grid["pp"], grid["dp"], strict=True)) == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    section = layout_section({"layout_grid": grid}, [])
    assert section is not None and section.key == "layout" and len(section.figures) == 1
    z = section.figures[0]["data"][0]["z"]
    assert len(z) == 2 and all(row[1] > row[0] for row in z)
