"""One step state for the live side: the steps sampler keeps it, the watcher it feeds reads the same one, and
the typical step has one definition (live/samplers/step_state.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import LineTail
from perftracker.live.samplers.step_state import RECENT_STEPS, StepFeed, StepState
from perftracker.live.samplers.steps_sampler import StepsSampler, _HookedRank
from perftracker.live.watch.watcher import WatchOptions, WatchSampler
from perftracker.rundir import step_file


def _ctx(tmp_path: Path) -> LiveContext:
    workers = [Worker(rank=r, local_rank=r, pid=os.getpid(), host="h", cmdline="train.py", run_id="", world_size=2,
                      parent=1) for r in range(2)]
    return LiveContext(run_dir=tmp_path / "run", job=Job(launcher_pid=os.getpid(), workers=workers), host="h")


def test_the_typical_step_is_the_median_of_the_last_steps_of_all_ranks() -> None:
    # GIVEN more steps than the state keeps: slow ones first, then RECENT_STEPS fast ones of two ranks
    state = StepState()
    for step in range(100):
        state.add(0, step, 0, 900_000_000)
    for step in range(RECENT_STEPS // 2):
        for rank, dur in ((0, 50_000_000), (1, 60_000_000)):
            state.add(rank, 100 + step, 10**9, 10**9 + dur)
    # THEN the typical step is the median of the last RECENT_STEPS only (the slow start is forgotten), every
    # record is counted, and each rank's last step is kept
    assert state.median_step_ns() == 55_000_000
    assert state.known == 100 + RECENT_STEPS and state.last_step == {0: 100 + RECENT_STEPS // 2 - 1,
                                                                     1: 100 + RECENT_STEPS // 2 - 1}
    # AND after a restart it is built again from the next steps
    state.restart()
    assert state.median_step_ns() is None
    state.add(0, 10_000, 0, 70_000_000)
    assert state.median_step_ns() == 70_000_000


def test_the_watcher_fed_by_the_steps_sampler_reads_the_sessions_one_step_state(tmp_path: Path) -> None:
    # GIVEN a hooked rank writing 30 steps of 40 ms, a steps sampler with a feed and a watcher on it
    ctx = _ctx(tmp_path)
    feed = StepFeed()
    steps = StepsSampler(find_outputs=False, feed=feed)
    spool = tmp_path / "spool" / "rank-0.jsonl"
    spool.parent.mkdir(parents=True)
    spool.write_text("".join(json.dumps({"rank": 0, "step": s, "start_ns": 10**9 * s, "end_ns": 10**9 * s + 40_000_000,
                                         "host": "h", "pid": 1}) + "\n" for s in range(30)), encoding="utf-8")
    steps.hooked[0] = _HookedRank(0, LineTail(spool), step_file(ctx.run_dir, 0))
    watch = WatchSampler(options=WatchOptions(), feed=feed)
    # WHEN the steps sampler reads them and the watcher looks
    steps.sample(ctx)
    watch._read_steps(ctx)
    steps.stop(ctx)
    # THEN there is one step state: the stack sampler's typical step (ctx.progress) is the watcher's, and the
    # records were counted once
    assert watch._step_state(ctx) is ctx.progress.steps
    assert ctx.progress.steps.median_step_ns() == watch._median() == 40_000_000
    assert watch._known == ctx.progress.steps.known == 30 and watch.state.last_step == {0: 29}
