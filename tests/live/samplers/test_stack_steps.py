"""The step signal from sampled stacks in the live watch (`live/samplers/stack_steps.py`): the sampler on a real Python
loop of known period, its grace period and its silence when the job has another step source, and the watcher's
handling of its coarse records (armed by bursts, judged by the burst rule, never taken for a stall)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.stack_steps import STACKS_SOURCE, StackStepsSampler
from perftracker.live.samplers.stacks import find_pyspy
from perftracker.live.samplers.step_state import StepFeed
from perftracker.live.watch.watcher import WatchOptions, WatchSampler

# The loop waits in both phases, as a training loop waits for its data and for the GPU: its period is set by the
# waits, so it stays ~120 ms on a machine whose CPUs are busy (a busy-looping phase stretched under load, and a
# burst then showed no period). py-spy records idle threads (--idle), so both phases are sampled.
LOOP = """
import time
def forward():
    time.sleep(0.03)
def data():
    time.sleep(0.09)
print("ready", flush=True)
while True:
    data()
    forward()
"""


def _ctx(tmp_path: Path, pids: list[int]) -> LiveContext:
    job = Job(launcher_pid=os.getpid(), workers=[Worker(rank=r, local_rank=r, pid=pid, host="node-a", cmdline="t.py",
                                                        run_id="", world_size=len(pids), parent=1)
                                                 for r, pid in enumerate(pids)])
    return LiveContext(run_dir=tmp_path / "run", job=job, host="node-a", diagnosis=AnalyzerDiagnosis())


def _records(ctx: LiveContext, rank: int) -> list[dict[str, object]]:
    path = ctx.run_dir / "steps" / f"rank-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
def test_the_sampler_writes_the_period_of_a_real_loop_as_a_stacks_record(tmp_path: Path) -> None:
    # GIVEN a real Python process looping every ~120 ms (90 ms waiting in data, 30 ms waiting in forward)
    proc = subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
        ctx = _ctx(tmp_path, [proc.pid])
        feed = StepFeed()
        sampler = StackStepsSampler(every_s=1.0, burst_s=2, rate_hz=100, grace_s=0.0, feed=feed)
        # WHEN the sampler records bursts until one shows a period (at most 3: a loaded machine may starve one)
        sampler.start(ctx)
        deadline = time.monotonic() + 60
        while sampler.periods < 1 and sampler.bursts < 3 and time.monotonic() < deadline:
            sampler.sample(ctx)
            time.sleep(0.2)
        sampler.stop(ctx)
    finally:
        proc.kill()
        proc.wait()
    # THEN one step-like record of source "stacks" carries the loop's period (within 20%), in the step file and the feed
    records = _records(ctx, 0)
    assert len(records) == sampler.periods == 1, (sampler.status(), ctx.notes)
    rec = records[0]
    assert rec["source"] == STACKS_SOURCE and rec["step"] == 0
    assert float(rec["period_s"]) == pytest.approx(0.12, rel=0.2)
    assert int(rec["end_ns"]) - int(rec["start_ns"]) == pytest.approx(float(rec["period_s"]) * 1e9, rel=1e-3)
    assert feed.take() == records


def test_the_sampler_waits_its_grace_period_and_stays_quiet_when_steps_come_from_elsewhere(tmp_path: Path) -> None:
    # GIVEN a sampler whose grace period has passed, on a job whose steps come from the hook (ctx.progress)
    ctx = _ctx(tmp_path, [os.getpid()])
    sampler = StackStepsSampler(grace_s=0.0)
    sampler.start(ctx)
    sampler._pyspy = "/nonexistent/py-spy"  # any launch would fail loudly in the notes
    ctx.progress.steps.last_step[0] = 12
    # WHEN it is asked to sample, THEN it records nothing and says why
    sampler.sample(ctx)
    assert sampler._round is None and "another step source" in sampler.status()
    # AND within its grace period it does not start either
    waiting = StackStepsSampler(grace_s=60.0)
    waiting.start(_ctx(tmp_path, [os.getpid()]))
    waiting._pyspy = "/nonexistent/py-spy"
    waiting.sample(ctx)
    assert waiting._round is None and ctx.notes == []


def _burst_record(rank: int, burst: int, period_ms: float, end_ns: int) -> dict[str, object]:
    period_ns = int(period_ms * 1e6)
    return {"rank": rank, "step": burst, "start_ns": end_ns - period_ns, "end_ns": end_ns, "host": "node-a",
            "source": STACKS_SOURCE, "period_s": period_ms / 1e3, "confidence": 0.8, "cycles": 40.0}


def test_the_watcher_arms_on_bursts_never_calls_their_cadence_a_hang_and_opens_a_stacks_degradation(
        tmp_path: Path) -> None:
    # GIVEN a watcher fed burst records 60 s apart, the last one 50 s ago (a real step stall rule would fire)
    ctx = _ctx(tmp_path, [os.getpid(), os.getpid()])
    feed = StepFeed()
    watcher = WatchSampler(options=WatchOptions(profile_seconds=0, baseline_seconds=0, trace_steps=0), feed=feed)
    watcher.start(ctx)
    now = time.time_ns()
    healthy = [(b, 100.0 + (b % 3)) for b in range(6)]
    feed.publish([_burst_record(r, b, ms, now - (56 - 60 * b) * 10**9 - 60 * 6 * 10**9) for b, ms in healthy
                  for r in (0, 1)])
    # WHEN it looks
    watcher.sample(ctx)
    # THEN it is armed (6 bursts = 2 x N), with no incident: the cadence is not a stall
    assert watcher.state.armed and watcher.state.incidents == []
    assert watcher.state.current_s[1] == pytest.approx(0.1, rel=0.05)
    # WHEN three more bursts of rank 1 and rank 0 show 250 ms
    feed.publish([_burst_record(r, b, 250.0, now) for b in (6, 7, 8) for r in (0, 1)])
    watcher.sample(ctx)
    # THEN one degradation incident opens, its step source "stacks", since burst 6, naming both ranks' series
    assert [kind for _, kind, _ in watcher.state.incidents] == ["degradation"]
    watcher.stop(ctx)
    record = json.loads(next((ctx.run_dir / "incidents").glob("*-degradation*/incident.json")).read_text())
    assert record["step_source"] == "stacks" and record["step"] == 6 and record["ranks"] == [0, 1]
    assert "sampled stacks" in record["trigger"]
