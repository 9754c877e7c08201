"""The watcher's online rules (analyzers/online/): degradation with its change point, hang, host signals,
against the clean real runs' noise and on synthetic series with a known change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from perftracker.analyzers.online.diagnosis import host_alarm
from perftracker.analyzers.online.step_rules import (
    DEFAULT_WINDOW,
    degradation_alarm,
    hang_alarm,
    series_alarm,
)
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store
from perftracker.store.alarms import StepSeries

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "accuracy"
# every rank of this clean run became 80% slower at once at step 24 and stayed so (the shared recording
# machine got loaded): a real job-wide slowdown, which the rule reports
JOB_WIDE_SLOWDOWN = {"clean-unpinned-32"}


def _series(rank: int, durations_ms: list[float], first_step: int = 0) -> StepSeries:
    return StepSeries(rank, tuple(range(first_step, first_step + len(durations_ms))),
                      tuple(int(d * 1e6) for d in durations_ms))


def _clean_runs() -> list[tuple[str, list[StepSeries]]]:
    runs = json.loads((CORPUS / "runs.json").read_text())["runs"]
    out = []
    for run in runs:
        if run["slowed_rank"] is not None:
            continue
        first = run["steps"] - run["profiled_steps"] + 2  # the steady traced part (the profiler's start is a real change)
        series = []
        for path in sorted((CORPUS / run["name"] / "steps").glob("rank-*.jsonl")):
            recs = sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["step"])
            recs = [r for r in recs if r["step"] >= first]
            series.append(StepSeries(recs[0]["rank"], tuple(r["step"] for r in recs),
                                     tuple(r["end_ns"] - r["start_ns"] for r in recs)))
        out.append((run["name"], series))
    return out


def test_the_clean_real_runs_give_no_degradation_alarm() -> None:
    # GIVEN the 21 clean real runs' step series, fed to the rule step by step as the watcher sees them
    runs = _clean_runs()
    assert len(runs) == 21
    fired = {}
    for name, series in runs:
        for end in range(2 * DEFAULT_WINDOW, max(len(s.steps) for s in series) + 1):
            alarm = degradation_alarm([StepSeries(s.rank, s.steps[:end], s.durations_ns[:end]) for s in series])
            if alarm is not None:
                fired[name] = alarm
                break
    # THEN none fires, except the run whose every rank really slowed at once
    assert set(fired) <= JOB_WIDE_SLOWDOWN
    for alarm in fired.values():  # and it says when: step 24, where every rank slowed
        assert 22 <= alarm.step <= 25


def test_a_sustained_slowdown_fires_within_n_steps_with_the_step_it_began_at() -> None:
    # GIVEN 100 noisy healthy steps of 50 ms, then steps of 75 ms from step 100
    rng = np.random.default_rng(1)
    healthy = list(50 + rng.normal(0, 3, 100))
    first_fire = None
    for extra in range(1, 30):
        slowed = list(75 + rng.normal(0, 3, extra)) if extra else []
        alarm = series_alarm(_series(2, healthy + slowed))
        if alarm is not None:
            first_fire = (extra, alarm)
            break
    # THEN it fires within N steps of the change and says it began at step 100, on rank 2
    assert first_fire is not None
    extra, alarm = first_fire
    assert extra <= DEFAULT_WINDOW
    assert alarm.step == 100 and alarm.ranks == (2,)
    assert alarm.current_s is not None and alarm.best_s is not None and alarm.current_s > 1.2 * alarm.best_s


def test_spikes_and_a_slowdown_that_ended_open_nothing() -> None:
    # GIVEN a healthy series with a 10x spike (a checkpoint) and one with 6 slow steps that came back
    base = [50.0 + (i % 5) for i in range(120)]
    spike = base[:60] + [500.0] + base[60:80]
    bump = base[:100] + [90.0] * 6 + base[:4]
    # THEN neither is a degradation
    assert series_alarm(_series(0, spike)) is None
    assert series_alarm(_series(0, bump)) is None


def test_the_job_series_of_one_log_is_rank_minus_one() -> None:
    # GIVEN step times from one log (rank -1) that rise by half
    alarm = degradation_alarm([_series(-1, [40.0 + (i % 3) for i in range(60)] + [60.0 + (i % 3) for i in range(12)])])
    # THEN the alarm is about the job
    assert alarm is not None and alarm.ranks == (-1,) and alarm.text.startswith("the job")


def test_hang_fires_after_k_typical_steps_and_the_floor() -> None:
    now = 100 * 10**9
    last = {0: 50, 1: 50}
    # GIVEN 50 ms steps; THEN 5 s without a step is not yet a hang (floor 10 s), 12 s is
    assert hang_alarm(last, {0: now - 5 * 10**9, 1: now - 5 * 10**9}, 50_000_000, 100, now) is None
    alarm = hang_alarm(last, {0: now - 12 * 10**9, 1: now - 12 * 10**9}, 50_000_000, 100, now)
    assert alarm is not None and alarm.kind == "hang" and alarm.step == 50
    # AND too few steps say nothing
    assert hang_alarm(last, {0: now - 60 * 10**9}, 50_000_000, 2, now) is None


def test_host_trigger_uses_the_offline_gpu_rules(tmp_path: Path) -> None:
    # GIVEN the synthetic thermal-throttling GPU samples (a GPU in thermal slowdown) alone
    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_traces" / "synthetic-gpu-4rank-thermal" / "counters", run / "counters")
    store = load_path(run, LoadOptions(cache_dir=None, workers=1))
    # WHEN the host trigger judges them
    alarm = host_alarm(store)
    # THEN it fires as the offline gpu_health analyzer would, naming the host
    assert alarm is not None and alarm.kind == "host"
    assert "gpu-node-1" in alarm.hosts or alarm.ranks


def test_host_trigger_is_quiet_without_host_signals() -> None:
    # GIVEN no counters at all; THEN nothing fires
    assert host_alarm(Store()) is None
