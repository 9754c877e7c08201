"""Many nodes: one `attach` per node into a shared directory, stacks at one agreed moment and on one
request file, one verdict.

The "nodes" are two torchrun launchers on this machine forming one 4-rank job (`--nnodes 2`), each
attached by its own `perftracker attach --host node-X`, as srun / pdsh / kubectl exec would start
them on real nodes.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.live.conftest import attach_command, free_port, launch_job, stop_job, wait_steps, wait_workers

HANG_RANK_3 = ["--steps", "100000", "--hang-rank", "3", "--hang-step", "3", "--step-sleep", "0.05",
               "--pg-timeout", "300"]


@pytest.mark.slow
def test_two_nodes_attached_separately_give_one_hang_verdict_naming_the_rank_on_the_other_node(
        tmp_path: Path) -> None:
    # GIVEN a job over two "nodes" (ranks 0-1 on node-a, 2-3 on node-b) where rank 3 never joins step 3's
    # all_reduce
    port = free_port()
    job_dir = tmp_path / "job"
    nodes = [launch_job(job_dir, 2, HANG_RANK_3, log=tmp_path / f"node{i}.log", nodes=(2, i, port)) for i in (0, 1)]
    try:
        for node in nodes:
            wait_workers(node, 2)
        wait_steps(job_dir, 0, 3)
        # WHEN each node's launcher is attached by its own attach, into one shared directory, with the same
        # --stacks-at moment; node-b's attach ends first, node-a's then analyzes the directory
        shared = tmp_path / "shared"
        at = time.time() + 8
        attaches = [
            subprocess.Popen(attach_command(f"pid:{node.pid}", shared, duration, "--host", host,
                                            "--stacks-at", f"{at:.3f}", *extra),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for node, host, duration, extra in ((nodes[0], "node-a", 28, ()), (nodes[1], "node-b", 20, ("--no-analyze",)))
        ]
        # AND, meanwhile, once both attaches are running (each took its first periodic look: a request file
        # older than an attach's start is not a request to it), someone asks every node for a stack dump with
        # one file in the shared directory
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(_periodic_rounds(shared)) < 2:
            time.sleep(0.2)
        (shared / "requests").mkdir(parents=True, exist_ok=True)
        (shared / "requests" / "stacks").write_text("")
        outputs = [a.communicate(timeout=120)[0] for a in attaches]
    finally:
        for node in nodes:
            stop_job(node)
    assert [a.returncode for a in attaches] == [0, 0], outputs
    # THEN each node wrote its own manifest with its own ranks
    manifests = {p.stem: json.loads(p.read_text()) for p in (shared / "manifests").glob("*.json")}
    assert sorted(manifests) == ["node-a", "node-b"]
    assert manifests["node-a"]["ranks"] == [0, 1] and manifests["node-b"]["ranks"] == [2, 3]
    # AND the agreed-time snapshot holds every rank of the job, each stamped with its node
    agreed = [p for p in (shared / "stacks").iterdir() if p.name.endswith("-at")]
    assert len(agreed) == 1, sorted(p.name for p in (shared / "stacks").iterdir())
    hosts = {json.loads(p.read_text())["rank"]: json.loads(p.read_text())["host"] for p in agreed[0].iterdir()}
    assert hosts == {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
    # AND the requested dump of both nodes landed in one folder named by the request, every rank in it
    requested = [p for p in (shared / "stacks").iterdir() if p.name.endswith("-request")]
    assert len(requested) == 1, sorted(p.name for p in (shared / "stacks").iterdir())
    assert sorted(p.name for p in requested[0].glob("rank-*.json")) == [f"rank-{r}.json" for r in range(4)]
    # AND node-a's attach said the directory is shared, and its verdict names rank 3 on node-b and where
    # the three others wait
    assert "Hosts node-b also write to" in outputs[0]
    doc = json.loads((shared / "perftracker-out" / "findings.json").read_text())
    hang = [f for f in doc["findings"] if f["analyzer"] == "hang"]
    assert len(hang) == 1 and hang[0]["ranks"] == [3] and hang[0]["hosts"] == ["node-b"], hang
    assert hang[0]["title"].startswith("Rank 3 is not in the collective all_reduce (sample_job.py:")
    assert "where ranks 0, 1, 2 wait" in hang[0]["title"]


def _periodic_rounds(shared: Path) -> list[Path]:
    """The periodic stack rounds taken so far (folders named by their time alone, no -at/-hang/-request)."""
    folder = shared / "stacks"
    return [p for p in folder.iterdir() if p.is_dir() and "-" not in p.name] if folder.is_dir() else []
