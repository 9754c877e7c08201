"""The seam between live samplers and the analyzers' verdicts (`perftracker.live.diagnosis`).

Samplers collect; whether a job is stuck, stalled or has a straggler is asked of `ctx.diagnosis`.
These tests give the samplers a fake diagnosis (its verdicts, and only those, drive what they do),
check that the default judges nothing, that `attach` wires in the analyzers' implementation, and
that this implementation agrees with the offline `hang` analyzer on the same stacks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.collectors.stacks.snapshots import load_stack_inputs
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.diagnosis import LiveDiagnosis, Look, NoDiagnosis
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.profile_sampler import ProfileSampler
from perftracker.live.samplers.stacks import StackSampler
from perftracker.live.session import SessionResult
from perftracker.store.stack_frames import main_stacks

from .test_stacks_hang import IN_ALL_REDUCE, SLEEPING, T0, findings_for, write_rank

THREADS = [{"os_thread_id": os.getpid(), "thread_name": "MainThread", "active": False,
            "frames": [{"name": "idle_here", "filename": "/job/train.py", "short_filename": "train.py", "line": 7}]}]


class FakeDiagnosis:
    """A LiveDiagnosis with fixed verdicts that records what it was asked."""

    def __init__(self, pattern: str = "", same: bool = False, blocked: bool = False, stall: str | None = None,
                 straggler: str = "") -> None:
        self.pattern, self.same, self.blocked, self.stall, self.straggler = pattern, same, blocked, stall, straggler
        self.looks: list[Look] = []
        self.stall_questions: list[tuple[int | None, int | None, int]] = []
        self.samples: list[pd.DataFrame] = []

    def hang_pattern(self, look: Look) -> str:
        self.looks.append(look)
        return self.pattern

    def same_picture(self, before: Look, after: Look) -> bool:
        return self.same

    def stayed_blocked(self, before: Look, after: Look, seconds: float) -> bool:
        return self.blocked

    def step_stall(self, quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
        self.stall_questions.append((quiet_ns, median_step_ns, steps_known))
        return self.stall

    def straggler_suspicion(self, profile_samples: pd.DataFrame) -> str:
        self.samples.append(profile_samples)
        return self.straggler


def _fake_pyspy(tmp_path: Path) -> str:
    """A py-spy stand-in: `dump` prints one idle main thread; `record` writes one raw stack line."""
    script = tmp_path / "py-spy"
    script.write_text("#!/bin/sh\n"
                      f"if [ \"$1\" = dump ]; then echo '{json.dumps(THREADS)}'; exit 0; fi\n"
                      'while [ "$1" != "--output" ]; do shift; done\n'
                      'echo "thread (1): MainThread;main (t.py:1) 20" > "$2"\n')
    script.chmod(0o755)
    return str(script)


def _context(tmp_path: Path, diagnosis: LiveDiagnosis | None = None) -> LiveContext:
    me = Worker(rank=5, local_rank=1, pid=os.getpid(), host="h", cmdline=sys.executable, run_id="r", world_size=8,
                parent=1)
    if diagnosis is None:
        return LiveContext(run_dir=tmp_path / "run", job=Job([me]), host="node-9")
    return LiveContext(run_dir=tmp_path / "run", job=Job([me]), host="node-9", diagnosis=diagnosis)


def _snapshots(ctx: LiveContext) -> list[str]:
    return sorted(p.name for p in (ctx.run_dir / "stacks").iterdir())


def test_the_stack_sampler_takes_a_hang_dump_when_the_diagnosis_says_stuck(tmp_path: Path) -> None:
    # GIVEN a stack sampler whose diagnosis calls every look hung, alike and blocked
    fake = FakeDiagnosis(pattern="fake: rank 5 stuck", same=True, blocked=True)
    ctx = _context(tmp_path, fake)
    sampler = StackSampler(interval_s=60, pyspy=_fake_pyspy(tmp_path))
    # WHEN two periodic rounds run
    sampler.sample(ctx)
    sampler.sample(ctx)
    # THEN the second round brings a native hang dump and the diagnosis' text as the suspicion
    assert ctx.progress.suspicion == "hang? fake: rank 5 stuck" and sampler.hang_dumps == 1
    assert [s.endswith("-hang") for s in _snapshots(ctx)] == [False, False, True]
    # AND the diagnosis was shown each rank's main thread as dumped, with its context switches
    seen = fake.looks[0][5]
    assert (seen.rank, seen.host, seen.pid, seen.idle) == (5, "node-9", os.getpid(), True)
    assert [f.name for f in seen.frames] == ["idle_here"] and isinstance(seen.switches, int)


def test_the_stack_sampler_takes_no_hang_dump_when_the_ranks_kept_waking_up(tmp_path: Path) -> None:
    # GIVEN a diagnosis that sees the same hung-looking picture, but ranks that did not stay blocked
    ctx = _context(tmp_path, FakeDiagnosis(pattern="fake pattern", same=True, blocked=False))
    sampler = StackSampler(interval_s=60, pyspy=_fake_pyspy(tmp_path))
    # WHEN two periodic rounds run
    sampler.sample(ctx)
    sampler.sample(ctx)
    # THEN there is no hang dump and no suspicion
    assert sampler.hang_dumps == 0 and not ctx.progress.suspicion and len(_snapshots(ctx)) == 2


def test_the_stack_sampler_dumps_on_the_diagnosis_step_stall(tmp_path: Path) -> None:
    # GIVEN steps that stopped 20 s ago, and a diagnosis that calls that a stall
    fake = FakeDiagnosis(stall="fake: no step lately")
    ctx = _context(tmp_path, fake)
    ctx.progress.steps.set_durations([100_000_000] * 10)
    ctx.progress.steps.last_step_ns = {5: time.time_ns() - 20 * 10**9}
    sampler = StackSampler(interval_s=60, pyspy=_fake_pyspy(tmp_path))
    # WHEN the sampler's watcher looks once
    sampler._triggers(ctx)
    # THEN it asked with the quiet time, the median step and the count, and took a hang dump with its text
    ((quiet_ns, median_ns, known),) = fake.stall_questions
    assert quiet_ns is not None and 19 * 10**9 < quiet_ns < 30 * 10**9 and (median_ns, known) == (100_000_000, 10)
    assert ctx.progress.suspicion.startswith("hang? fake: no step lately") and sampler.hang_dumps == 1


def test_without_a_diagnosis_the_samplers_collect_but_judge_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN samplers on a context built without a diagnosis, steps that stopped long ago
    ctx = _context(tmp_path)
    assert isinstance(ctx.diagnosis, NoDiagnosis)
    ctx.progress.steps.set_durations([100_000_000] * 10)
    ctx.progress.steps.last_step_ns = {5: time.time_ns() - 600 * 10**9}
    pyspy = _fake_pyspy(tmp_path)
    stacks = StackSampler(interval_s=60, pyspy=pyspy)
    monkeypatch.setattr("perftracker.live.samplers.profile_sampler.find_pyspy", lambda: pyspy)
    profile = ProfileSampler(seconds=1, delay_s=0)
    # WHEN stacks are dumped twice, the watcher looks, and a recording finishes
    stacks.sample(ctx)
    stacks.sample(ctx)
    stacks._triggers(ctx)
    _record(ctx, profile)
    # THEN everything was written, but no hang dump was taken and nothing is suspected
    assert len(_snapshots(ctx)) == 2 and stacks.hang_dumps == 0
    assert (ctx.run_dir / "profiles" / "rank-5.txt").is_file() and not ctx.progress.suspicion


def _record(ctx: LiveContext, sampler: ProfileSampler) -> None:
    sampler.start(ctx)
    sampler.sample(ctx)  # launches the recorder
    deadline = time.monotonic() + 10
    while "recorded" not in sampler.status() and time.monotonic() < deadline:
        time.sleep(0.1)
        sampler.sample(ctx)


def test_the_profile_sampler_suspicion_is_the_diagnosis_verdict_on_its_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a profile sampler whose diagnosis names a straggler
    fake = FakeDiagnosis(straggler="fake: rank 5 straggles")
    ctx = _context(tmp_path, fake)
    pyspy = _fake_pyspy(tmp_path)
    monkeypatch.setattr("perftracker.live.samplers.profile_sampler.find_pyspy", lambda: pyspy)
    # WHEN one recording of the rank ends
    _record(ctx, ProfileSampler(seconds=1, delay_s=0))
    # THEN the suspicion is the diagnosis' verdict, given the recording as a profile_samples table
    assert ctx.progress.suspicion == "fake: rank 5 straggles"
    (samples,) = fake.samples
    assert samples["rank"].tolist() == [5] and samples["stack"].tolist() == ["main (t.py:1)"]


def test_attach_hands_the_samplers_the_analyzers_diagnosis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from perftracker.cli import app

    # GIVEN attach on a job, with the session itself stubbed out to capture its context
    seen: list[LiveContext] = []

    def session(ctx: LiveContext, *args: object, **kwargs: object) -> SessionResult:
        seen.append(ctx)
        return SessionResult("duration", 0.0)

    monkeypatch.setattr("perftracker.cli.attach.find_job", lambda spec, host: _context(tmp_path).job)
    monkeypatch.setattr("perftracker.cli.attach.run_session", session)
    # WHEN attach runs
    result = CliRunner().invoke(app, ["attach", "pid:1", "-o", str(tmp_path / "out"), "-q", "--no-analyze"])
    # THEN its samplers judge with the analyzers' rules
    assert result.exit_code == 0, result.output
    (ctx,) = seen
    assert isinstance(ctx.diagnosis, AnalyzerDiagnosis)


@pytest.mark.parametrize("kind", ["stuck", "busy"])
def test_the_analyzers_diagnosis_agrees_with_the_hang_analyzer(tmp_path: Path, kind: str) -> None:
    # GIVEN two periodic snapshots 15 s apart, ranks 0, 2, 3 in all_reduce and rank 1 asleep, where the
    # waiting ranks' main threads either stayed blocked or woke up thousands of times in between
    for i, snap in enumerate(("p1", "p2")):
        for r in (0, 2, 3):
            write_rank(tmp_path, snap, r, IN_ALL_REDUCE, ts_ns=T0 + i * 15 * 10**9,
                       switches=100 + (i if kind == "stuck" else 4000 * i))
        write_rank(tmp_path, snap, 1, SLEEPING, ts_ns=T0 + i * 15 * 10**9, switches=50 + 3000 * i)
    table, _ = load_stack_inputs(sorted(tmp_path.rglob("rank-*.json")))
    looks = main_stacks(table)
    # WHEN the live diagnosis judges them as the sampler would, and the offline analyzer reads them
    live = AnalyzerDiagnosis()
    pattern = live.hang_pattern(looks["p2"])
    stuck = live.same_picture(looks["p1"], looks["p2"]) and live.stayed_blocked(looks["p1"], looks["p2"], 15.0)
    offline = findings_for(tmp_path)
    # THEN both see the same split, and both call it a hang only when the ranks stayed blocked
    assert pattern == "ranks 0, 2, 3 wait in all_reduce (train.py:66); rank 1 is at hang_or_sleep (train.py:44)"
    assert stuck == (kind == "stuck") == bool(offline)
