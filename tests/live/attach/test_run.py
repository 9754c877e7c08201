"""`perftracker run -- <launch command>` on real torchrun jobs (gloo on CPU): output and exit code pass
through, and whatever happens to the job a run directory with a report is left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "scripts" / "sample_job.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(run: Path, *job_args: str, nproc: int = 2) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "perftracker", "run", "-o", str(run), "--",
           sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_port", str(free_port()), str(JOB), "--run-dir", str(run / "job"), "--profile-steps", "2",
           "--width", "64", *job_args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=str(ROOT))


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, err


def findings(run: Path) -> list[dict]:  # type: ignore[type-arg]
    return json.loads((run / "perftracker-out" / "findings.json").read_text())["findings"]


@pytest.mark.slow
def test_clean_job_passes_output_and_exit_code_through(tmp_path: Path) -> None:
    # GIVEN a clean 2-rank job run through perftracker
    code, out, err = finish(launch(tmp_path / "run", "--steps", "12"))
    # THEN its exit code is 0, its own output is on stdout, and a report exists
    assert code == 0, err[-2000:]
    assert "perftracker: job exited with 0" in err
    assert (tmp_path / "run" / "perftracker-out" / "report.html").is_file()
    # the job ran prepared: NCCL_DEBUG and the hook's step files, env snapshots, stacks
    env = json.loads((tmp_path / "run" / "env" / "rank-0.json").read_text())["env"]
    assert env["NCCL_DEBUG"] == "INFO" and env["KINETO_USE_DAEMON"] == "1"
    steps = (tmp_path / "run" / "steps" / "rank-0.jsonl").read_text().splitlines()
    assert len(steps) >= 8  # written by the step hook loaded through sitecustomize
    assert not [f for f in findings(tmp_path / "run") if f["analyzer"] in ("hang", "crash")
                and f["severity"] != "info"]


@pytest.mark.slow
def test_job_killed_by_sigterm_still_gets_a_report(tmp_path: Path) -> None:
    # GIVEN a long job
    proc = launch(tmp_path / "run", "--steps", "100000", "--step-sleep", "0.01")
    # WHEN perftracker run receives SIGTERM while it runs
    deadline = time.monotonic() + 90
    steps = tmp_path / "run" / "steps" / "rank-0.jsonl"
    while time.monotonic() < deadline and (not steps.exists() or len(steps.read_text().splitlines()) < 20):
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGTERM)
    code, _, err = finish(proc)
    # THEN the job's death by signal is our exit code, and everything collected is kept with a report
    assert code != 0
    assert len(steps.read_text().splitlines()) >= 20
    assert (tmp_path / "run" / "perftracker-out" / "findings.json").is_file(), err[-2000:]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["signal"] == signal.SIGTERM and manifest["exit_code"] == code


@pytest.mark.slow
def test_rank_that_raises_is_named_as_the_first_failure(tmp_path: Path) -> None:
    # GIVEN a 2-rank job where rank 1 raises at step 5
    code, _, err = finish(launch(tmp_path / "run", "--steps", "30", "--raise-rank", "1", "--raise-step", "5"))
    # THEN the job's failure is our exit code, and the post-mortem names rank 1 and its error
    assert code != 0
    crash = [f for f in findings(tmp_path / "run") if f["analyzer"] == "crash" and f["severity"] == "critical"]
    assert any(f["ranks"] == [1] and "failed on purpose" in json.dumps(f) for f in crash), err[-3000:]
    assert "Report:" in err


@pytest.mark.slow
def test_rank_stalled_until_the_collective_timeout_is_named_from_the_timeout(tmp_path: Path) -> None:
    # GIVEN 4 ranks where rank 2 never joins the all_reduce at step 4, and a 6 s process-group timeout
    code, _, err = finish(launch(tmp_path / "run", "--steps", "30", "--hang-rank", "2", "--hang-step", "4",
                                 "--pg-timeout", "6", nproc=4), timeout=240)
    # THEN the job fails, and the post-mortem names rank 2 from the timeout lines of the other ranks
    assert code != 0
    crash = [f for f in findings(tmp_path / "run") if f["analyzer"] == "crash" and f["severity"] == "critical"]
    named = [f for f in crash if f["ranks"] == [2]]
    assert named, [f["title"] for f in crash] + [err[-2000:]]
    # AND as never joining the all_reduce the others waited in, which each of them reported (which waiting rank
    # times out first is a race: a rank whose peer exited first reports the closed connection instead; the
    # recorded fixture tests/fixtures/postmortem/gloo-timeout-lost-peer is such a run)
    assert "never joined all_reduce" in named[0]["title"], named[0]["title"]
    evidence = named[0]["evidence"]
    assert sorted(evidence["timed_out_ranks"] + evidence["lost_peer_ranks"]) == [0, 1, 3], evidence
