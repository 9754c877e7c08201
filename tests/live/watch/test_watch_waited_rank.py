"""`perftracker attach --watch` on one real unprepared torchrun job (4 ranks, gloo, DDP, no hook, no traces): its
step times come from one log only (rank 0 prints Megatron-style `iteration N/ M | elapsed time per iteration
(ms): X |` lines), so the step times name no rank, and in DDP every rank's Python stack waits inside the
autograd engine. Once the healthy baseline is recorded, rank 2 is SIGSTOPped 60 ms of every 100 ms from
outside: the degradation incident's analysis names rank 2 from the ranks' sampled scheduler states (the
`waited_rank` analyzer: rank 2 is stopped while the others sleep in the collective), folds the job-wide
degradation into that one finding, and names no other rank in it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from perftracker.live.samplers.stacks import find_pyspy

from ..conftest import launch_job, stop_job, wait_steps, wait_workers
from .watch_helpers import duty_cycle, step_of, wait_baseline, wait_incident

SLOWED = 2
JOB = ["--steps", "100000", "--print-steps", "--step-sleep", "0.03", "--width", "64", "--batch", "16"]
# This 2-core machine, shared with other test runs, moves a clean 4-rank job's step time by tens of percent; the
# duty cycle makes it 2-3x slower, so the rule asks for +60% (as tests/live/watch/test_watch_stacks.py).
RISE = "0.6"
STEPS_OFF = 40  # the change step found within this many steps of the step the slowdown began at


@pytest.mark.slow
@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
def test_watch_names_the_rank_slowed_from_outside_in_an_unprepared_job_from_the_ranks_states(tmp_path: Path) -> None:
    job_dir, out = tmp_path / "job", tmp_path / "watch"
    # GIVEN an unhooked 4-rank job whose step times are only rank 0's printed lines, watched from its start
    log = tmp_path / "job.log"
    proc = launch_job(job_dir, nproc=4, job_args=JOB, log=log)
    stop = threading.Event()
    attach = None
    try:
        pids = wait_workers(proc, 4)
        # attached while the ranks still import torch: attach's own start-up (~20 s under load) overlaps theirs
        attach = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{proc.pid}", "-o", str(out),
                                   "--quiet", "--watch", "--no-analyze", "--incident-seconds", "3",
                                   "--watch-rise", RISE],
                                  stdout=open(tmp_path / "attach.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        wait_steps(job_dir, 0, 5, timeout=60)
        wait_baseline(out, 90)
        # WHEN rank 2 is stopped 60 ms of every 100 ms from outside, once the healthy baseline is recorded
        slowed_at = step_of(job_dir, SLOWED, time.time_ns())
        duty_cycle(pids[SLOWED], 0.06, 0.1, stop)
        done = wait_incident(out, "degradation", 180)
        stop.set()
        findings = json.loads((Path(done["folder"]) / "findings.json").read_text())["findings"]
        named = [(f["analyzer"], f["severity"], f["ranks"], f["title"]) for f in findings]
        # THEN the incident's step times are the job's as a whole (one log), yet its top finding names rank 2,
        # from the ranks' states: rank 2 stopped while the others sleep
        waited = [f for f in findings if f["analyzer"] == "waited_rank"]
        assert len(waited) == 1 and waited[0]["ranks"] == [SLOWED], named
        assert waited[0]["evidence"]["doing"] == "stopped", waited[0]["title"]
        assert findings[0]["analyzer"] == "waited_rank", named
        # AND the job-wide degradation is folded into it (one cause, one finding), with the step it began at
        assert not any(f["analyzer"] == "degradation" and f["severity"] != "info" for f in findings), named
        since = waited[0]["evidence"]["since_step"]
        assert since is None or abs(since - slowed_at) <= STEPS_OFF, (since, slowed_at)
        # AND no other rank is named by any finding about who is slow
        assert all(set(f["ranks"]) <= {SLOWED} for f in findings
                   if f["analyzer"] in ("waited_rank", "baseline_shift", "stack_profile") and f["severity"] != "info"), named
    finally:
        stop.set()
        stop_job(proc)
        if attach is not None:
            attach.wait(timeout=120)
