"""The rank the others wait for in a `--watch` incident (analyzers/online/waited_rank.py), from each rank's
main-thread state sampled through the incident's window, and its fold with the job-wide degradation
(analyzers/online/waited_fold.py).

Synthetic records with exact ground truth (the state samples and scheduler accounting written here, read through
the loader as an incident's evidence), then a real recorded incident (tests/fixtures/waited_rank, written by
`scripts/record_waited_rank.py`: a 4-rank unhooked job whose rank 2 was SIGSTOPped 60 ms of every 100 ms), the
real clean windows of the same job, and the /proc reader on a real stopped process."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.online.waited_fold import fold_into_waited_rank
from perftracker.analyzers.online.waited_rank import analyze_waited_rank
from perftracker.collectors.counters.sched import read_state
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.pipeline import findings_of
from perftracker.store import Store

S = 10**9
T0 = 10**18
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "waited_rank"
QUIET = {"S": 57, "R": 3}  # a healthy rank of a job that mostly waits: asleep 95% of 60 samples


def _states(folder: Path, counts: dict[int, dict[str, int]], t0: int = T0) -> None:
    """State samples every 75 ms: rank -> {state letter: number of samples} (in a shuffled order)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for rank, by_state in counts.items():
        letters = [s for s, n in sorted(by_state.items()) for _ in range(n)]
        random.Random(rank).shuffle(letters)
        lines += [json.dumps({"ts_ns": t0 + k * 75_000_000, "host": "node-a", "rank": rank, "pid": 100 + rank,
                              "state": s}) for k, s in enumerate(letters)]
    (folder / "node-a.states.jsonl").write_text("\n".join(lines) + "\n")


def _sched(folder: Path, shares: dict[int, tuple[float, float]], seconds: float = 4.5, t0: int = T0) -> None:
    """Two scheduler snapshots per rank `seconds` apart: rank -> (wait share, run share) of the window."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"ts_ns": at, "host": "node-a", "rank": rank, "pid": 100 + rank,
                         "run_ns": 10 * S + int(k * run * seconds * S), "wait_ns": 5 * S + int(k * wait * seconds * S),
                         "slices": 1000 + k, "threads": 4, "load1": 3.0, "cpus": 2})
             for rank, (wait, run) in shares.items() for k, at in enumerate((t0, t0 + int(seconds * S)))]
    (folder / "node-a.sched.jsonl").write_text("\n".join(lines) + "\n")


def _steps(evidence: Path, before_ms: float = 40.0, after_ms: float = 40.0, n: int = 120) -> None:
    """The job's step times from one log (rank -1): `before_ms` for the first half, `after_ms` after, +-2 ms."""
    rng = random.Random(7)
    path = evidence / "steps" / "rank--1.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    at, lines = T0, []
    for k in range(n):
        dur = int(((before_ms if k < n // 2 else after_ms) + rng.uniform(-2, 2)) * 1e6)
        lines.append(json.dumps({"rank": -1, "step": k, "start_ns": at, "end_ns": at + dur, "source": "log"}))
        at += dur
    path.write_text("\n".join(lines) + "\n")


def _load(evidence: Path) -> Store:
    if not (evidence / "steps").is_dir():
        _steps(evidence)
    return load_path(evidence, LoadOptions(cache_dir=None, workers=1))


def _findings(evidence: Path) -> list[Finding]:
    return analyze_waited_rank(Analysis(_load(evidence)))


def test_a_clean_window_names_no_rank(tmp_path: Path) -> None:
    # GIVEN four ranks asleep 90-95% of the window each (they all wait in turn)
    _states(tmp_path / "sched", {0: {"S": 55, "R": 5}, 1: {"S": 57, "R": 3}, 2: {"S": 54, "R": 6}, 3: QUIET})
    # WHEN analyzed, THEN no rank is named
    assert _findings(tmp_path) == []


def test_a_stopped_rank_is_named_with_what_stops_it(tmp_path: Path) -> None:
    # GIVEN rank 2 stopped (T) 36 of 60 samples and asleep 18, while ranks 0, 1, 3 are asleep 57 of 60
    _states(tmp_path / "sched", {0: QUIET, 1: QUIET, 2: {"T": 36, "S": 18, "R": 6}, 3: QUIET})
    # WHEN analyzed
    (found,) = _findings(tmp_path)
    # THEN rank 2 is named, stopped from outside, with its shares and the others'
    assert found.ranks == (2,) and found.severity == Severity.WARNING and found.evidence["doing"] == "stopped"
    assert "asleep 30% of the incident's window, the other ranks 95%" in found.title
    assert "stopped from outside (state T" in found.title and "60% of the window" in found.title
    assert found.evidence["drop"] == pytest.approx(0.65, abs=1e-4)
    assert [s["stopped"] for s in found.evidence["states"]] == [0.0, 0.0, 0.6, 0.0]
    assert found.confidence is not None and found.confidence > 0.99


def test_a_rank_waiting_for_a_cpu_is_named_from_the_scheduler_accounting(tmp_path: Path) -> None:
    # GIVEN rank 1 runnable or running (R) 40 of 60 samples while the others sleep 57 of 60, and the scheduler
    # accounting of the window: rank 1 waited for a CPU 55% of it and ran 10%, the others waited 5% and ran 8%
    _states(tmp_path / "sched", {0: QUIET, 1: {"R": 40, "S": 20}, 2: QUIET, 3: QUIET})
    _sched(tmp_path / "sched", {0: (0.05, 0.08), 1: (0.55, 0.10), 2: (0.05, 0.08), 3: (0.05, 0.08)})
    # WHEN analyzed
    (found,) = _findings(tmp_path)
    # THEN rank 1 is named as waiting for a CPU, and the advice is about its cores
    assert found.ranks == (1,) and found.evidence["doing"] == "waiting for a CPU"
    assert "waiting for a CPU (runnable while another task held its core) 55% of the window" in found.title
    assert "taskset" in found.recommendation


def test_a_rank_computing_while_the_others_sleep_is_named(tmp_path: Path) -> None:
    # GIVEN rank 3 running 40 of 60 samples while the others sleep, and on a CPU 66% of the window (the others 8%),
    # waiting for one no more than they do
    _states(tmp_path / "sched", {0: QUIET, 1: QUIET, 2: QUIET, 3: {"R": 40, "S": 20}})
    _sched(tmp_path / "sched", {0: (0.03, 0.08), 1: (0.03, 0.08), 2: (0.03, 0.08), 3: (0.02, 0.66)})
    # WHEN analyzed
    (found,) = _findings(tmp_path)
    # THEN rank 3 is named as computing while the others wait
    assert found.ranks == (3,) and found.evidence["doing"] == "computing"
    assert "computing while the others waited: on a CPU 66% of the window" in found.title


def test_a_rank_that_always_sleeps_less_is_not_named_when_the_baseline_shows_it(tmp_path: Path) -> None:
    # GIVEN rank 0 asleep 30 of 60 samples and the others 57, in the incident's window and in the healthy baseline
    usual = {0: {"S": 30, "R": 30}, 1: QUIET, 2: QUIET, 3: QUIET}
    _states(tmp_path / "sched", usual)
    _states(tmp_path / "baseline" / "sched", usual, t0=T0 - 100 * S)
    # WHEN analyzed, THEN no rank is named: its state did not change against the others'
    assert _findings(tmp_path) == []
    # AND without the baseline, the same window names rank 0 (compared across ranks only)
    (tmp_path / "baseline" / "sched" / "node-a.states.jsonl").unlink()
    (found,) = _findings(tmp_path)
    assert found.ranks == (0,) and found.evidence["baseline_subtracted"] is False


def test_too_few_samples_or_a_spread_of_the_others_say_nothing(tmp_path: Path) -> None:
    # GIVEN a stopped rank seen in 20 samples only (fewer than MIN_SAMPLES)
    few = tmp_path / "few"
    _states(few / "sched", {0: {"S": 19, "R": 1}, 1: {"T": 12, "S": 8}, 2: {"S": 19, "R": 1}})
    # AND a rank asleep 55% while the others are at 95%, 60% and 90% (their spread is as large as its drop)
    spread = tmp_path / "spread"
    _states(spread / "sched", {0: {"S": 57, "R": 3}, 1: {"S": 36, "R": 24}, 2: {"S": 54, "R": 6},
                               3: {"S": 33, "R": 27}})
    # WHEN analyzed, THEN neither names a rank
    assert _findings(few) == [] and _findings(spread) == []


def test_the_job_wide_degradation_is_folded_into_the_named_rank(tmp_path: Path) -> None:
    # GIVEN an incident's evidence: one log's step times, 40 ms then 80 ms (the job as a whole, no rank), and
    # rank 2 stopped while the others sleep
    _steps(tmp_path, 40.0, 80.0)
    _states(tmp_path / "sched", {0: QUIET, 1: QUIET, 2: {"T": 36, "S": 18, "R": 6}, 3: QUIET})
    # WHEN the whole pipeline runs (every analyzer, the folds, the ranking)
    findings = findings_of(Analysis(_load(tmp_path)))
    # THEN the top finding names rank 2 since the change step, the degradation is in its evidence, not beside it,
    # and it carries the degradation's cost (the 40 ms the slowdown adds), counted once
    top = findings[0]
    assert top.analyzer == "waited_rank" and top.ranks == (2,), [(f.analyzer, f.title) for f in findings]
    assert abs(top.evidence["since_step"] - 60) <= 2 and "since step" in top.title
    assert not any(f.analyzer == "degradation" and f.severity >= Severity.WARNING for f in findings)
    (folded,) = top.evidence["folded"]
    assert folded["analyzer"] == "degradation" and "for the job as a whole" in folded["title"]
    assert top.cost.seconds_per_step == pytest.approx(0.040, abs=0.004) and top.severity == Severity.CRITICAL


def test_the_recorded_incident_names_the_rank_slowed_from_outside() -> None:
    # GIVEN a real incident of `attach --watch` on an unhooked 4-rank job (step times from rank 0's log only)
    # whose rank 2 was SIGSTOPped 60 ms of every 100 ms once the baseline was recorded
    # WHEN its evidence is analyzed as the watcher analyzes it
    findings = findings_of(Analysis(load_path(FIXTURES / "sigstop-rank2", LoadOptions(cache_dir=None, workers=1))))
    # THEN the top finding names rank 2 and no other, stopped from outside, since the change step, the degradation
    # of the job as a whole folded into it
    top = findings[0]
    assert top.analyzer == "waited_rank" and top.ranks == (2,), [(f.analyzer, f.title) for f in findings]
    assert top.evidence["doing"] == "stopped" and top.evidence["since_step"] is not None
    folded = {f["analyzer"] for f in top.evidence["folded"]}
    assert "degradation" in folded and folded <= {"degradation", "baseline_shift", "stack_profile", "cpu_contention"}
    assert all(set(f.ranks) <= {2} for f in findings if f.severity >= Severity.WARNING)


@pytest.mark.parametrize("window", sorted(p.name for p in (FIXTURES / "clean").glob("window-*")))
def test_recorded_clean_windows_name_no_rank(window: str) -> None:
    # GIVEN a real clean window of the same job (every rank's states for 4 s, nothing slowed), with its baseline
    store = load_path(FIXTURES / "clean" / window, LoadOptions(cache_dir=None, workers=1))
    # WHEN analyzed, THEN no rank is named, with the baseline or without it
    assert analyze_waited_rank(Analysis(store)) == []
    table = store["proc_states"]
    store.set_table("proc_states", table[table["window"] == "incident"])
    assert analyze_waited_rank(Analysis(store)) == []


def test_the_state_of_a_real_process_stopped_and_sleeping() -> None:
    # GIVEN a real sleeping process
    proc = subprocess.Popen(["sleep", "30"])
    try:
        # WHEN it is stopped by SIGSTOP, THEN its state reads T; WHEN continued, THEN S again
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while read_state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_state(proc.pid) == "T"
        proc.send_signal(signal.SIGCONT)
        while read_state(proc.pid) != "S" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_state(proc.pid) == "S"
    finally:
        proc.kill()
        proc.wait()
    assert read_state(2**22 + 7) is None  # no such pid


def test_a_bad_state_line_is_a_note_and_the_baseline_window_is_kept_apart(tmp_path: Path) -> None:
    # GIVEN states of an incident and of its baseline, one line of which is not a record
    _states(tmp_path / "sched", {0: QUIET})
    _states(tmp_path / "baseline" / "sched", {0: QUIET})
    path = tmp_path / "sched" / "node-a.states.jsonl"
    path.write_text(path.read_text() + '{"ts_ns": 1, "rank": 0, "pid": 1, "state": "Q"}\n')
    # WHEN loaded
    store = _load(tmp_path)
    # THEN every record is in the table, in its window, and the bad line is named in a note
    assert store["proc_states"]["window"].value_counts().to_dict() == {"incident": 60, "baseline": 60}
    assert any("not process-state records" in n.message and "line 61" in n.message for n in store.notes)


def test_the_fold_keeps_findings_about_other_ranks_and_causes_of_their_own() -> None:
    # GIVEN a waited-rank finding about rank 2, a job-wide degradation warning with a 30 ms cost, a baseline_shift
    # about rank 2, one about rank 1, and an info degradation
    def make(analyzer: str, key: str, ranks: tuple[int, ...], severity: Severity = Severity.WARNING,
             cost: float = 0.0) -> Finding:
        return Finding(analyzer, severity, f"{analyzer} {ranks}", "", {}, ranks=ranks, cost=Cost(cost, cost),
                       key=key)

    waited = make("waited_rank", "waited_rank:2", (2,), cost=0.01)
    job = make("degradation", "degradation:change", (), Severity.CRITICAL, cost=0.03)
    same, other = make("baseline_shift", "baseline_shift:2", (2,)), make("baseline_shift", "baseline_shift:1", (1,))
    periodic = make("degradation", "degradation:periodic", (), Severity.INFO)
    # WHEN folded
    out = fold_into_waited_rank([job, waited, same, other, periodic])
    # THEN the job-wide degradation and rank 2's stacks finding are in the waited-rank finding's evidence, which
    # takes the critical severity and the 30 ms cost; rank 1's finding and the info stay as they were
    assert [f.key for f in out] == ["waited_rank:2", "baseline_shift:1", "degradation:periodic"]
    assert out[0].severity == Severity.CRITICAL and out[0].cost.seconds_per_step == 0.03
    assert [f["id"] for f in out[0].evidence["folded"]] == [job.id, same.id]
    # AND without a waited-rank finding nothing is folded
    assert fold_into_waited_rank([job, same]) == [job, same]
    # AND a straggler finding from traces about rank 2 takes the waited-rank finding in, and nothing else moves
    traced = make("straggler", "straggler:2", (2,), cost=0.02)
    out = fold_into_waited_rank([job, waited, traced, same])
    assert [f.key for f in out] == ["degradation:change", "straggler:2", "baseline_shift:2"]
    assert [f["id"] for f in out[1].evidence["folded"]] == [waited.id] and out[1].cost.seconds_per_step == 0.02
