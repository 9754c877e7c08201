"""`perftracker run --sanity-exclude -- torchrun ...` on real torchrun launches (gloo on CPU, one machine, two
ranks): the check runs first under the job's own launcher arguments, into RUN/sanity; a clean check starts the
job, a check that names a node refuses to start it (exit 4) and says which node and why. The failing check is
forced with the test hook PERFTRACKER_SANITY_TEST_FAIL (rank 1's GEMM fails, as a failing device would): the
launch, the check's judgement and the refusal are real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live.attach.test_run import free_port

ROOT = Path(__file__).resolve().parents[3]
JOB = "import os, pathlib; pathlib.Path(os.environ['MARK']).joinpath(os.environ['RANK']).write_text('ran')\n"


def _run(tmp_path: Path, extra_env: dict[str, str]) -> tuple[int, str]:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    (tmp_path / "mark").mkdir()
    cmd = [sys.executable, "-m", "perftracker", "run", "--no-hook", "--no-flight-recorder", "--sanity-exclude",
           "--sanity-time-box", "6", "-o", str(tmp_path / "run"), "--",
           sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()), str(job)]
    env = {**os.environ, "MARK": str(tmp_path / "mark"), "PERFTRACKER_HOST": "lab-node", **extra_env}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT),
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


@pytest.mark.slow
def test_a_clean_check_starts_the_job_and_leaves_its_result_in_the_run_directory(tmp_path: Path) -> None:
    # GIVEN a 2-rank torchrun job run with --sanity-exclude
    code, err = _run(tmp_path, {})
    # THEN the check ran under torchrun (both ranks), named nothing, and the job started (both ranks ran)
    assert code == 0, err[-3000:]
    result = json.loads((tmp_path / "run" / "sanity" / "findings.json").read_text())
    assert result["summary"]["ranks"] == 2 and result["summary"]["exclude"] == []
    assert "names no node to exclude" in err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["sanity"]["exclude"] == [] and manifest["sanity"]["wrote"] is True
    assert sorted(p.name for p in (tmp_path / "mark").iterdir()) == ["0", "1"]


@pytest.mark.slow
def test_a_check_that_names_a_node_refuses_to_start_the_job_saying_which_and_why(tmp_path: Path) -> None:
    # GIVEN the same job, with rank 1's GEMM failing during the check
    code, err = _run(tmp_path, {"PERFTRACKER_SANITY_TEST_FAIL": "1:gemm_fp32_tflops"})
    # THEN exit 4, the node and the failed figure are named, the exclude list is in RUN/sanity, the job never ran
    assert code == 4, err[-3000:]
    assert "would exclude lab-node" in err and "gemm_fp32_tflops" in err and "not starting the job" in err
    assert (tmp_path / "run" / "sanity" / "exclude.txt").read_text() == "lab-node\n"
    assert list((tmp_path / "mark").iterdir()) == []
