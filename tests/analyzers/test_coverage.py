"""The verdict says what was judged, from which inputs, and what could not be for lack of inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from api_helpers import analyzed

REPO = Path(__file__).resolve().parents[2]
STALL = REPO / "sample_traces" / "gloo-4rank-stall-rank2"
SLOW = REPO / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
SYNTHETIC_GPU = REPO / "sample_traces" / "synthetic-gpu-4rank-thermal"


def _areas(document: dict, key: str) -> dict[str, object]:  # type: ignore[type-arg]
    value = "from" if key == "judged" else "needs"
    return {a["area"]: a[value] for a in document["summary"]["coverage"][key]}


def test_environment_only_says_what_it_could_not_judge(tmp_path: Path) -> None:
    # GIVEN a run directory holding only the environment snapshots of four ranks (an attach on a job
    # without traces, hook, GPU or RDMA, before any stack was taken)
    run = tmp_path / "run"
    shutil.copytree(STALL / "env", run / "env")
    # WHEN it is analyzed
    result = analyzed(run, tmp_path / "out", cache=False)
    doc = result.document
    # THEN the verdict names what was judged and what was not, instead of a bare "no problems"
    assert doc["summary"]["verdict"] == (
        "No problems found in: NCCL configuration. Not judged, for lack of inputs: stragglers and step time, "
        "GPU kernels, overlap and idle time, GPU health, RDMA network, hangs.")
    assert _areas(doc, "judged") == {"NCCL configuration": ["environment"]}
    needs = _areas(doc, "not_judged")
    assert "step times" in str(needs["stragglers and step time"]) and "NVML" in str(needs["GPU health"])
    # AND the job's ranks and host are counted from the environments, though there are no traces
    assert doc["summary"]["ranks"] == 4 and len(doc["summary"]["hosts"]) == 1
    # AND the report lists what each unjudged area needs
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="coverage"' in html and "GPU health: needs NVML samples" in html


def test_full_sample_run_is_judged_from_its_inputs(tmp_path: Path) -> None:
    # GIVEN the real sample run: CPU traces, step files and environments, no GPU or RDMA counters
    # WHEN it is analyzed
    doc = analyzed(SLOW, tmp_path / "out", cache=False).document
    # THEN stragglers are judged from traces and step times; GPU kernels are not (CPU traces), nor GPU
    # health and RDMA (no samples: the machine has neither), nor hangs (no stacks); a crash area is not
    # named for a run with no job output
    judged = _areas(doc, "judged")
    assert judged["stragglers and step time"] == ["traces", "step times"]
    not_judged = _areas(doc, "not_judged")
    assert set(not_judged) == {"GPU kernels, overlap and idle time", "GPU health", "RDMA network", "hangs"}
    assert "CPU events only" in str(not_judged["GPU kernels, overlap and idle time"])
    assert "NVML" in str(not_judged["GPU health"])
    assert not doc["summary"]["verdict"].startswith("No problems")


def test_gpu_sample_run_judges_gpu_health_and_rdma_from_its_counters(tmp_path: Path) -> None:
    # GIVEN the synthetic GPU sample: GPU traces, NVML samples and RDMA port counters
    # WHEN it is analyzed
    doc = analyzed(SYNTHETIC_GPU, tmp_path / "out", cache=False).document
    # THEN stragglers, GPU kernels, GPU health and RDMA are judged from those inputs; hangs (no stacks)
    # and the NCCL configuration (no environments or NCCL logs) are not
    judged = _areas(doc, "judged")
    assert judged["stragglers and step time"] == ["traces"]
    assert judged["GPU health"] == ["GPU samples"] and judged["RDMA network"][0] == "port counters"
    assert "GPU kernels, overlap and idle time" in judged
    assert set(_areas(doc, "not_judged")) == {"NCCL configuration", "hangs"}
    assert not doc["summary"]["verdict"].startswith("No problems")


def test_cli_prints_the_unjudged_areas(tmp_path: Path) -> None:
    # GIVEN an environment-only run directory
    run = tmp_path / "run"
    shutil.copytree(STALL / "env", run / "env")
    # WHEN `perftracker analyze` runs on it
    res = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(run), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, check=False, cwd=REPO)
    # THEN it exits 0 and the terminal names the areas it could not judge
    assert res.returncode == 0, res.stderr
    assert "Not judged, for lack of inputs: stragglers and step time" in " ".join(res.stdout.split())
    doc = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert doc["summary"]["coverage"]["judged"][0]["area"] == "NCCL configuration"


def test_one_rank_is_not_enough_to_judge_stragglers(tmp_path: Path) -> None:
    # GIVEN the trace of one rank only, and sampled stacks of two ranks (a median rank needs three)
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    shutil.copy(SLOW / "traces" / "rank-0.pt.trace.json.gz", run / "traces")
    (run / "profiles").mkdir()
    for r in (0, 1):
        (run / "profiles" / f"rank-{r}.txt").write_text("thread (1): MainThread;main (t.py:1) 200\n")
    # WHEN analyzed
    doc = analyzed(run, tmp_path / "out", cache=False).document
    # THEN stragglers are listed as not judged, with the need for two ranks
    assert "at least two ranks" in str(_areas(doc, "not_judged")["stragglers and step time"])
