"""A real 4-rank torchrun job (CPU, gloo) writes a complete, well-formed perftracker run directory.

Promise checked: ``scripts/sample_job_runner.run_job`` produces, for every rank, a gzip Kineto
trace with ``ProfilerStep#`` events and ``distributedInfo`` naming that rank, a step file with one
line per step, and an env file holding allow-listed variables only (no secrets). One job is run for
the whole module (about 10 s on 2 cores); the assertions do not depend on timing.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from sample_job_runner import run_job

pytestmark = pytest.mark.slow

NPROC = 4
STEPS = 8
PROFILE_STEPS = 3
SLOW_RANK = 1


@pytest.fixture(scope="session")  # (session: the grouped xdist worker may interleave this module with others)
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # GIVEN a job environment holding a fake secret and an allow-listed NCCL variable
    extra_env = {"AWS_SECRET_ACCESS_KEY": "xyz", "NCCL_DEBUG": "INFO"}
    # WHEN a real 4-rank job runs a few steps, one rank slowed, into a fresh directory
    return run_job(
        tmp_path_factory.mktemp("sample") / "run",
        nproc=NPROC,
        steps=STEPS,
        profile_steps=PROFILE_STEPS,
        slow_rank=SLOW_RANK,
        slow_factor=3,
        timeout=90,
        width=128,
        batch=32,
        extra_env=extra_env,
    )


def _load_trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    assert isinstance(data, dict)
    return data


def test_every_rank_has_a_gzip_kineto_trace_of_its_own_rank(run_dir: Path) -> None:
    # GIVEN the run directory of the job (fixture)
    traces = sorted((run_dir / "traces").glob("rank-*.pt.trace.json.gz"))
    # THEN there is one trace per rank
    assert [p.name for p in traces] == [f"rank-{r}.pt.trace.json.gz" for r in range(NPROC)]
    for rank, path in enumerate(traces):
        # WHEN the trace is read as gzip JSON
        trace = _load_trace(path)
        # THEN it names its rank and world, and marks each profiled step
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == NPROC
        assert trace["distributedInfo"]["backend"] == "gloo"
        names = {e.get("name", "") for e in trace["traceEvents"]}
        step_marks = sorted(n for n in names if n.startswith("ProfilerStep#"))
        assert step_marks == [f"ProfilerStep#{s}" for s in range(STEPS - PROFILE_STEPS, STEPS)]
        assert {"data", "forward", "backward", "optimizer"} <= names
        # AND the DDP gradient all-reduce over gloo was recorded
        assert "gloo:all_reduce" in names
        # AND only the slowed rank did the labelled extra work
        assert ("extra_work" in names) == (rank == SLOW_RANK)


def test_every_rank_has_one_step_line_per_step(run_dir: Path) -> None:
    for rank in range(NPROC):
        # WHEN the rank's step file is read
        lines = (run_dir / "steps" / f"rank-{rank}.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        # THEN it has every step, in order, with a positive duration and the four phases
        assert [r["step"] for r in records] == list(range(STEPS))
        for record in records:
            assert record["rank"] == rank
            assert record["end_ns"] > record["start_ns"] > 0
            assert set(record["phases_ns"]) == {"data", "forward", "backward", "optimizer"}
            assert record["host"]


def test_env_files_keep_allow_listed_variables_and_drop_secrets(run_dir: Path) -> None:
    for rank in range(NPROC):
        # WHEN the rank's env file is read
        text = (run_dir / "env" / f"rank-{rank}.json").read_text(encoding="utf-8")
        record = json.loads(text)
        # THEN the allow-listed variables are there
        assert record["rank"] == rank and record["pid"] > 0
        assert record["env"]["NCCL_DEBUG"] == "INFO"
        assert record["env"]["RANK"] == str(rank)
        assert record["env"]["WORLD_SIZE"] == str(NPROC)
        # AND the secret is not, neither by name nor by value
        assert "AWS_SECRET_ACCESS_KEY" not in text
        assert "xyz" not in text


def test_manifest_describes_the_job(run_dir: Path) -> None:
    # WHEN the manifest is read
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    # THEN it names the format, ranks, collectors and the slowed rank
    assert manifest["format"] == "perftracker-run"
    assert manifest["ranks"] == list(range(NPROC)) and manifest["world_size"] == NPROC
    assert manifest["collectors"] == ["kineto", "steps", "env"]
    assert manifest["slowdown"]["rank"] == SLOW_RANK
    assert "torch.distributed.run" in manifest["command"]
