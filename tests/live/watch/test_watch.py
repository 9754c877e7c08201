"""`perftracker attach --watch` on one real torchrun job (2 ranks, gloo, ~50 ms steps, the step hook): healthy
first (no incident), then rank 1 SIGSTOP-duty-cycled from outside (a degradation incident naming the step it
began at, whose report names rank 1), then rank 0 hangs through the job's own switch (a hang incident naming
rank 0 and where the other waits). The slowdown begins once the healthy baseline is recorded, so the incident's stacks are
compared with it and name rank 1. One job for every assertion: about a minute on this 2-core machine."""

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
from .watch_helpers import duty_cycle, incidents, named_by, step_of, wait_baseline, wait_incident

DETECT_STEPS = 30  # an incident opens within 3 x N steps after the slowdown began (8 to 27 measured here)


@pytest.mark.slow
@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
def test_watch_opens_a_degradation_then_a_hang_incident_and_none_while_healthy(tmp_path: Path) -> None:
    job_dir, out = tmp_path / "job", tmp_path / "watch"
    # GIVEN a hooked 2-rank job whose rank 0 hangs at step 330, watched from step 5
    proc = launch_job(job_dir, nproc=2, job_args=["--steps", "2000", "--step-sleep", "0.04", "--hook",
                                                  "--hang-rank", "0", "--hang-step", "330"])
    stop = threading.Event()
    attach = None
    try:
        pids = wait_workers(proc, 2)
        wait_steps(job_dir, 0, 5)
        attach = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{proc.pid}", "-o", str(out),
                                   "--quiet", "--watch", "--no-analyze", "--incident-seconds", "4",
                                   "--prom", str(tmp_path / "watch.prom")],
                                  stdout=open(tmp_path / "attach.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        # WHEN it runs healthy for 6 s and until its healthy baseline is recorded, THEN no incident opens
        time.sleep(6)
        wait_baseline(out, 90)
        assert incidents(out) == []
        # WHEN rank 1 is stopped 70% of every 100 ms from outside
        slowed_at = step_of(job_dir, 1, time.time_ns())
        duty_cycle(pids[1], 0.07, 0.1, stop)
        opened = wait_incident(out, "degradation", 40, done=False)
        # THEN a degradation incident opens within DETECT_STEPS steps, saying the step it began at
        assert step_of(job_dir, 1, opened["opened_ns"]) - slowed_at <= DETECT_STEPS
        assert abs(opened["step"] - slowed_at) <= 3
        done = wait_incident(out, "degradation", 180)
        stop.set()
        folder = Path(done["folder"])
        findings = json.loads((folder / "findings.json").read_text())["findings"]
        assert (folder / "report.html").is_file()
        # AND its findings say since which step, and name rank 1 (the side-by-side stacks or the traces)
        assert any(f["analyzer"] == "degradation" and abs(f["evidence"].get("change_step", -99) - slowed_at) <= 3
                   for f in findings)
        named = [(f["analyzer"], f["title"], f["ranks"]) for f in findings]
        assert {1} <= set(done["named_ranks"]), named
        # AND its stacks, compared with the healthy baseline's, name rank 1 and no other (a finding of its own, or
        # folded into the finding naming rank 1 from the ranks' states)
        assert named_by(findings, "baseline_shift") == [[1]], named
        # WHEN rank 0 hangs (the job's own switch), THEN a hang incident names it and where rank 1 waits
        hang = wait_incident(out, "hang", 180)
        assert hang["named_ranks"] == [0], hang
        hang_findings = json.loads((Path(hang["folder"]) / "findings.json").read_text())["findings"]
        assert any(f["analyzer"] == "hang" and 0 in f["ranks"] and "hang_forever" in json.dumps(f)
                   for f in hang_findings)
        assert 'perftracker_incidents_total{kind="hang"} 1' in (tmp_path / "watch.prom").read_text()
    finally:
        stop.set()
        stop_job(proc)
        if attach is not None:
            attach.wait(timeout=120)
