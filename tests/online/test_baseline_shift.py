"""The `baseline_shift` analyzer: an incident's stacks against the watcher's healthy baseline, rank by rank.

Real recordings (tests/fixtures/baseline_shift, `scripts/record_baseline_shift.py`): three incidents of an
unhooked 2-rank job (step times from rank 0's log only) whose rank 1 was SIGSTOP-duty-cycled after the baseline,
and six clean windows of one clean job against its baseline; and the 4-rank profiles of
tests/fixtures/profiles (a clean job as the baseline, a job whose rank 2 does 3x the forward as the incident).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding
from perftracker.analyzers.online.baseline_shift import analyze_baseline_shift, is_wait_frame
from perftracker.cli.incidents import analyze_incident
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.live.watch.incidents import copy_baseline, step_started_ns

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SHIFT = FIXTURES / "baseline_shift"
MAIN = "<module> (train.py:90);main (train.py:50)"
BACKWARD = f"{MAIN};backward (torch/autograd/__init__.py:395);_engine_run_backward (torch/autograd/graph.py:979)"
LOADER = f"{MAIN};next (train.py:120)"
COMPUTE = f"{MAIN};forward (train.py:30)"


def _findings(run: Path) -> list[Finding]:
    return analyze_baseline_shift(Analysis(load_path(run, LoadOptions(cache_dir=None, workers=1))))


def _write_profile(folder: Path, rank: int, stacks: dict[str, int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"thread (1): MainThread;{stack} {count}" for stack, count in stacks.items()]
    (folder / f"rank-{rank}.txt").write_text("\n".join(lines) + "\n")
    (folder / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "host": "node-a", "rate_hz": 20}))


def _run(tmp_path: Path, before: dict[int, dict[str, int]], after: dict[int, dict[str, int]]) -> Path:
    run = tmp_path / "evidence"
    for rank, stacks in before.items():
        _write_profile(run / "baseline" / "profiles", rank, stacks)
    for rank, stacks in after.items():
        _write_profile(run / "profiles", rank, stacks)
    return run


@pytest.mark.parametrize("incident", ["sigstop-1", "sigstop-2", "sigstop-3"])
def test_real_unhooked_incident_names_the_slowed_rank_of_two_and_since_which_step(incident: str) -> None:
    # GIVEN a real incident of an unhooked 2-rank job (steps from rank 0's log only: rank -1) whose rank 1 was
    # SIGSTOPped 80% of the time after the baseline
    # WHEN its evidence is analyzed
    findings = _findings(SHIFT / incident)
    # THEN one warning names rank 1: the other rank now waits for it, against the baseline, beyond the noise
    assert [f.ranks for f in findings] == [(1,)], [f.title for f in findings]
    f = findings[0]
    assert f.title.startswith("Rank 1 since step ")
    assert "the other ranks now wait for it in _engine_run_backward" in f.title
    ev = f.evidence
    waiting = ev["other_ranks_waiting"][0]
    assert waiting["rank"] == 0 and waiting["waiting_after"] - waiting["waiting_before"] > 0.3
    assert ev["waiting_after"] - ev["waiting_before"] < 0.05
    assert ev["significance"]["test"] == "stopped waiting" and f.confidence > 0.999
    # AND the step it began at is the change point of the job's step times from its log
    assert isinstance(ev["since_step"], int) and 240 <= ev["since_step"] <= 280


def test_clean_windows_against_the_baseline_give_no_finding(tmp_path: Path) -> None:
    # GIVEN six later 10 s windows of a clean real job, each against the baseline recorded when the watch armed
    for k in range(6):
        run = tmp_path / f"window-{k}"
        shutil.copytree(SHIFT / "clean" / "baseline", run / "baseline")
        shutil.copytree(SHIFT / "clean" / f"window-{k}" / "profiles", run / "profiles")
        # WHEN analyzed, THEN no warning (the false-positive rate measured on them: 0 of 6)
        assert _findings(run) == [], k


def test_four_real_ranks_one_changed_is_named_with_the_frame_its_time_moved_to(tmp_path: Path) -> None:
    # GIVEN the 4-rank profiles of a clean job as the baseline and of one whose rank 2 does 3x the forward
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "profiles" / "clean", run / "baseline" / "profiles")
    shutil.copytree(FIXTURES / "profiles" / "slow-rank2", run / "profiles")
    # WHEN analyzed, THEN rank 2, the job's own frame and its shares before and after
    findings = _findings(run)
    assert [f.ranks for f in findings] == [(2,)]
    ev = findings[0].evidence
    assert ev["frame"] == "SlowableMLP.forward (sample_job.py:93)"
    assert ev["share_before"] < 0.02 < 0.25 < ev["share_after"]
    assert findings[0].title.startswith("Rank 2 since the baseline: 29% of samples now in SlowableMLP.forward")
    # AND the way back (the slow job as the baseline, the clean one now: a recovery) names nobody
    back = tmp_path / "back"
    shutil.copytree(FIXTURES / "profiles" / "slow-rank2", back / "baseline" / "profiles")
    shutil.copytree(FIXTURES / "profiles" / "clean", back / "profiles")
    assert _findings(back) == []


def test_a_job_wide_move_names_no_rank_and_one_ranks_own_move_names_it(tmp_path: Path) -> None:
    # GIVEN three ranks that all move from compute into the data loader (a job-wide change) ...
    before = {r: {COMPUTE: 150, LOADER: 10, BACKWARD: 40} for r in range(3)}
    moved = {r: {COMPUTE: 40, LOADER: 120, BACKWARD: 40} for r in range(3)}
    # THEN nobody is named
    assert _findings(_run(tmp_path / "all", before, moved)) == []
    # GIVEN only rank 1's time moving into the loader while the others wait for it
    after = {0: {COMPUTE: 100, LOADER: 10, BACKWARD: 90}, 1: {COMPUTE: 60, LOADER: 130, BACKWARD: 10},
             2: {COMPUTE: 100, LOADER: 10, BACKWARD: 90}}
    findings = _findings(_run(tmp_path / "one", before, after))
    # THEN rank 1, with the frame and its shares before and after
    assert [f.ranks for f in findings] == [(1,)]
    assert findings[0].title.startswith("Rank 1 since the baseline: 65% of samples now in next (train.py:120), 5% in "
                                        "the baseline")
    assert findings[0].evidence["moved_frames"][0]["frame"] == "next (train.py:120)"


def test_too_few_samples_say_nothing(tmp_path: Path) -> None:
    # GIVEN windows of 20 samples per rank (1 s at 20 Hz)
    before = {r: {COMPUTE: 18, BACKWARD: 2} for r in range(2)}
    after = {0: {COMPUTE: 2, BACKWARD: 18}, 1: {COMPUTE: 20}}
    # THEN no judgment
    assert _findings(_run(tmp_path, before, after)) == []


def test_wait_frames_are_collectives_work_waits_and_backward() -> None:
    assert is_wait_frame("all_reduce (torch/distributed/distributed_c10d.py:2800)")
    assert is_wait_frame("_engine_run_backward (torch/autograd/graph.py:979)")
    assert is_wait_frame("Work.wait (torch/distributed/distributed_c10d.py:100)")
    assert not is_wait_frame("next (train.py:120)")
    assert not is_wait_frame("all_reduce (mylib/comm.py:3)")


def test_the_loader_keeps_the_baseline_window_apart(tmp_path: Path) -> None:
    # GIVEN an evidence folder with the incident's and the baseline's profiles
    run = _run(tmp_path, {0: {COMPUTE: 60}}, {0: {LOADER: 70}})
    # WHEN loaded, THEN each window has its own table
    store = load_path(run, LoadOptions(cache_dir=None, workers=1))
    assert set(store["baseline_profile_samples"]["stack"]) == {COMPUTE}
    assert set(store["profile_samples"]["stack"]) == {LOADER}
    assert isinstance(store["baseline_profile_samples"], pd.DataFrame)


def test_the_capture_copies_the_baseline_once_it_is_complete(tmp_path: Path) -> None:
    baseline, evidence = tmp_path / "incidents" / "baseline", tmp_path / "evidence"
    _write_profile(baseline / "profiles", 0, {COMPUTE: 60})
    notes: list[str] = []
    # GIVEN a baseline still recording (no baseline.json yet), THEN nothing copied, said in the notes
    copy_baseline(baseline, evidence, notes)
    assert not (evidence / "baseline").exists() and "no baseline window yet" in notes[0]
    # GIVEN a baseline that ended after the change began (the slowdown came while it recorded), THEN not copied
    (baseline / "baseline.json").write_text(json.dumps({"captured_ns": 2 * 10**18}))
    (evidence / "steps").mkdir(parents=True)
    (evidence / "steps" / "rank--1.jsonl").write_text(
        json.dumps({"rank": -1, "step": 7, "start_ns": 10**18, "end_ns": 10**18 + 5}) + "\n")
    copy_baseline(baseline, evidence, notes, began_ns=step_started_ns(evidence / "steps", 7))
    assert not (evidence / "baseline").exists() and "still recording when the change began" in notes[1]
    # GIVEN a 4 s baseline window, WHEN the change began 0.5 s before it ended (over a tenth of it), THEN not copied
    (baseline / "baseline.json").write_text(json.dumps({"captured_ns": 10**18 + 3 * 10**8, "profile_seconds": 4.0}))
    copy_baseline(baseline, evidence, notes, began_ns=10**18 - 2 * 10**8)
    assert not (evidence / "baseline").exists() and "still recording when the change began" in notes[2]
    # WHEN the changed step began 0.3 s before it ended (a step or two early: 90% of it healthy), THEN copied
    copy_baseline(baseline, evidence, notes, began_ns=step_started_ns(evidence / "steps", 7))
    assert sorted(p.name for p in (evidence / "baseline" / "profiles").iterdir()) == ["rank-0.json", "rank-0.txt"]


def test_the_incident_analysis_writes_the_finding_into_findings_json_and_the_report(tmp_path: Path) -> None:
    # GIVEN a real incident's evidence, WHEN analyzed as the watcher has it analyzed (the CLI's reporter)
    verdict = analyze_incident(SHIFT / "sigstop-1", tmp_path)
    # THEN the incident names rank 1, in findings.json and in report.html
    assert {1} <= set(verdict.ranks)
    found = [f for f in json.loads((tmp_path / "findings.json").read_text())["findings"]
             if f["analyzer"] == "baseline_shift"]
    assert [f["ranks"] for f in found] == [[1]]
    assert "the other ranks now wait for it" in (tmp_path / "report.html").read_text()
