"""Record the fixtures of the step-period estimator (`analyzers/online/step_period.py`): real sampled-stack
bursts of a real 2-rank job, with the job's own step times as the truth.

Promise: ``python scripts/record_stack_bursts.py OUT [--scenario clean|slowed|hung ...] [--seconds S] [--rate R]
[--bursts K]`` runs, per scenario, a 2-rank torchrun job of ``scripts/sample_job.py`` (CPU, gloo, no hook,
``--step-sleep 0.08``: ~90 ms steps) and records K bursts of both ranks side by side exactly as the watcher's
stack-steps sampler does (`live/samplers/stack_steps.py`: ``py-spy record --nonblocking --idle --threads --format
chrometrace``), each into ``OUT/<scenario>-<k>-rank<r>.json.gz``; ``OUT/truth.json`` holds, per file, the mean
step time of that rank's steps that ended inside the burst (from the job's own step files) and how many:

* ``clean``: nothing disturbed;
* ``slowed``: rank 1 SIGSTOPped 200 ms of every 250 ms from outside (`sample_job_runner.duty_cycle`): one
  iteration gets through per cycle, so the loop runs at 250 ms;
* ``hung``: rank 0 never joins step 30's all-reduce (``--hang-rank 0 --hang-step 30``): both ranks sit still.

Every job started is stopped before the script exits. Exit 0 when the fixtures were written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from sample_job_runner import duty_cycle, free_port, job_command, worker_pids

from perftracker.live.attach.discovery import Worker
from perftracker.live.samplers.profile_sampler import BurstRound
from perftracker.live.samplers.stacks import find_pyspy

JOB_ARGS = ["--steps", "100000", "--profile-steps", "0", "--width", "64", "--batch", "16", "--step-sleep", "0.08"]


def _steps(run: Path, rank: int) -> list[dict[str, int]]:
    path = run / "steps" / f"rank-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _wait_steps(run: Path, steps: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(len(_steps(run, r)) >= steps for r in (0, 1)):
            return
        time.sleep(0.5)
    raise TimeoutError(f"the job did not reach {steps} steps within {timeout:.0f} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    import psutil

    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)
    proc.wait(timeout=10)


def record(out: Path, scenario: str, seconds: int, rate: int, bursts: int, truth: dict[str, object]) -> None:
    pyspy = find_pyspy()
    assert pyspy is not None, "py-spy is not installed"
    work = Path(tempfile.mkdtemp(prefix=f"stack-bursts-{scenario}-"))
    args = JOB_ARGS + (["--hang-rank", "0", "--hang-step", "30"] if scenario == "hung" else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(job_command(work / "job", 2, free_port(), args), cwd=REPO, env=env,
                            stdout=open(work / "job.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            start_new_session=True)
    stop = threading.Event()
    try:
        _wait_steps(work / "job", 30 if scenario == "hung" else 20)
        pids = worker_pids(proc.pid)
        if scenario == "slowed":
            duty_cycle(pids[1], 0.2, 0.25, stop)
            time.sleep(3)
        if scenario == "hung":
            time.sleep(5)
        workers = [Worker(r, r, pid, "", "", "", 2, proc.pid) for r, pid in sorted(pids.items())]
        for k in range(bursts):
            rnd = BurstRound(pyspy, seconds, rate, work)
            rnd.start(workers)
            while not rnd.done():
                time.sleep(0.2)
            end_ns = rnd.started_ns + int(seconds * 1e9)
            for rec in rnd.recorders:
                name = f"{scenario}-{k}-rank{rec.rank}.json.gz"
                with open(rec.out, "rb") as src, gzip.open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                inside = [s for s in _steps(work / "job", rec.rank)
                          if rnd.started_ns <= s["start_ns"] and s["end_ns"] <= end_ns]
                mean = (sum(s["end_ns"] - s["start_ns"] for s in inside) / len(inside) / 1e9) if inside else None
                truth[name] = {"scenario": scenario, "rank": rec.rank, "rate_hz": rate, "seconds": seconds,
                               "mean_step_s": mean, "steps": len(inside)}
                print(name, truth[name], flush=True)
            time.sleep(1)
    finally:
        stop.set()
        _stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scenario", action="append", choices=["clean", "slowed", "hung"])
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--bursts", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    truth_file = args.out / "truth.json"
    truth: dict[str, object] = json.loads(truth_file.read_text()) if truth_file.is_file() else {}
    for scenario in args.scenario or ["clean", "slowed", "hung"]:
        record(args.out, scenario, args.seconds, args.rate, args.bursts, truth)
    truth_file.write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
