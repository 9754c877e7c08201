"""Record the pipeline job's scenarios as test fixtures: real 4-rank gloo runs, 2 stages x 2 replicas.

Promise: ``python scripts/record_pipeline_runs.py [--out tests/fixtures/pipeline_gloo] [--cases clean,...]`` runs
``scripts/pipeline_job.py`` under ``torchrun --nproc-per-node 4`` once per run of each case and writes
``<out>/<case>/`` (one run: its ranks' gzipped traces in ``traces/``; several runs: ``run-NN/`` folders) and
``<out>/<case>/case.json`` (the scenario's arguments, its ground truth, the load average before and after
each run, the step times rank 0 printed, the torch version). The machine is shared and busy while recording:
that load is part of what the fixtures show, and case.json says how much there was.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "scripts" / "pipeline_job.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")

# Megatron order tp-cp-ep-dp-pp, TP = 1, 2 replicas x 2 stages: rank = replica + 2 * stage.
LAYOUT = {"dp_groups": [[0, 1], [2, 3]], "pp_groups": [[0, 2], [1, 3]],
          "stage": {"0": 0, "1": 0, "2": 1, "3": 1}, "replica": {"0": 0, "1": 1, "2": 0, "3": 1}}

CASES: dict[str, dict[str, Any]] = {
    "clean": {
        "runs": 10,
        "args": ["--layers-stage0", "3", "--layers-stage1", "3", "--profile-steps", "3"],
        "truth": {"problem": None},
    },
    "imbalance": {
        "runs": 1,
        "args": ["--layers-stage0", "3", "--layers-stage1", "8", "--profile-steps", "5"],
        "truth": {"problem": "stage_imbalance", "heavy_stage": 1, "layers": [3, 8]},
    },
    "slow_worker": {
        "runs": 1,
        "args": ["--layers-stage0", "3", "--layers-stage1", "3", "--profile-steps", "5",
                 "--slow-rank", "1", "--slow-factor", "3"],
        "truth": {"problem": "slow_worker", "slow_rank": 1, "stage": 0, "replica": 1,
                  "victims": {"pipeline_successor": 3, "dp_peers": [0]}},
    },
    "gpipe": {
        "runs": 1,
        "args": ["--layers-stage0", "3", "--layers-stage1", "3", "--profile-steps", "3", "--schedule", "gpipe"],
        "truth": {"problem": None, "schedule": "gpipe"},
    },
}


def run_once(args: list[str], dest: Path, port: int) -> dict[str, Any]:
    """One torchrun of the job into `dest`; its step times and the load around it."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(TORCHRUN), "--nproc-per-node", "4", "--master-port", str(port), str(JOB),
               "--trace-dir", tmp, *args]
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        if done.returncode != 0:
            raise SystemExit(f"record_pipeline_runs: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        dest.mkdir(parents=True, exist_ok=True)
        for trace in sorted(Path(tmp).glob("rank-*.pt.trace.json.gz")):
            shutil.copy(trace, dest / trace.name)
    step_ms: list[float] = []
    for line in done.stdout.splitlines():
        if line.startswith("{\"step_ms\""):
            step_ms = json.loads(line)["step_ms"]
    return {"load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()], "step_ms": step_ms}


def record(out: Path, name: str, port: int) -> None:
    case = CASES[name]
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    runs = []
    for i in range(case["runs"]):
        dest = folder / f"run-{i:02d}" if case["runs"] > 1 else folder / "traces"
        meta = run_once(case["args"], dest, port)
        runs.append({"folder": dest.relative_to(folder).as_posix(), **meta})
        print(f"{name} {i}: {meta}", flush=True)
    record_ = {"case": name, "job": "scripts/pipeline_job.py", "launcher": "torchrun --nproc-per-node 4",
               "backend": "gloo (CPU)", "torch": torch.__version__, "args": case["args"],
               "layout": LAYOUT, "truth": case["truth"], "runs": runs}
    (folder / "case.json").write_text(json.dumps(record_, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "pipeline_gloo")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    parser.add_argument("--port", type=int, default=29631)
    args = parser.parse_args(argv)
    for name in args.cases.split(","):
        if name not in CASES:
            parser.error(f"unknown case {name!r}")
        record(args.out, name, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
