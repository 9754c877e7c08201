"""Watch clean real jobs for minutes with `perftracker attach --watch` and count the incidents (there should be none).

Promise: ``python scripts/watch_soak.py [--jobs J] [--minutes M] [--nproc N] [--unhooked]`` runs J clean torchrun
jobs of ``scripts/sample_job.py`` (CPU, gloo, ~50 ms steps, nothing slowed; hooked, or with ``--unhooked`` timed
only by rank 0's log lines), each watched for about M
minutes by ``attach --watch --no-analyze``, and prints per job the steps watched and the incidents opened
(kind and trigger), then the total. With ``--stacks EVERY``: unprepared jobs instead (no hook, no step lines,
~140 ms steps: ``--step-sleep 0.1 --width 256 --batch 256``), watched through sampled-stack bursts every EVERY
seconds (``--stack-steps-every``; ``--rise`` is ``--watch-rise``); it prints the bursts with a period.
Exit 0 whatever the count (it is a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from sample_job_runner import free_port, job_command, worker_pids


def soak(tmp: Path, index: int, args: argparse.Namespace) -> list[dict[str, object]]:
    run_dir, out = tmp / f"job-{index}", tmp / f"watch-{index}"
    steps = int(args.minutes * 60 / (0.14 if args.stacks else 0.06))
    source = ["--print-steps"] if args.unhooked else ["--hook"]
    job_args = ["--steps", str(steps), "--profile-steps", "0", *source, "--step-sleep", "0.04", "--width", "64",
                "--batch", "16"]
    watch_args = ["--watch-rise", str(args.rise)]
    if args.stacks:
        job_args = ["--steps", str(steps), "--profile-steps", "0", "--step-sleep", "0.1", "--width", "256",
                    "--batch", "256"]
        watch_args += ["--stack-steps-every", str(args.stacks)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    log = open(tmp / f"job-{index}.log", "wb") if args.unhooked else subprocess.DEVNULL  # noqa: SIM115
    job = subprocess.Popen(job_command(run_dir, args.nproc, free_port(), job_args), cwd=REPO, env=env,
                           stdout=log, stderr=subprocess.STDOUT if args.unhooked else subprocess.DEVNULL,
                           start_new_session=True)
    try:
        while len(worker_pids(job.pid)) < args.nproc and job.poll() is None:
            time.sleep(0.2)
        att = subprocess.run([sys.executable, "-m", "perftracker", "attach", f"pid:{job.pid}", "--watch",
                              "--no-analyze", "--quiet", "-o", str(out), *watch_args], cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, timeout=args.minutes * 60 * 3 + 120)
        del att
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    found = []
    for path in sorted((out / "incidents").glob("*/incident.json")):
        record = json.loads(path.read_text())
        found.append({"kind": record["kind"], "trigger": record["trigger"]})
    steps_file = out / "steps" / ("rank--1.jsonl" if args.unhooked else "rank-0.jsonl")
    watched = len(steps_file.read_text().splitlines()) if steps_file.is_file() else 0
    if args.stacks:
        steps_dir = out / "steps"
        watched = sum(line.count('"stacks"') for path in steps_dir.glob("rank-*.jsonl")
                      for line in path.read_text().splitlines()) if steps_dir.is_dir() else 0
        print(f"job {index}: {watched} rank-bursts with a period, {len(found)} incident(s) {found}", flush=True)
        return found
    print(f"job {index}: {watched} steps of {'the job (its log)' if args.unhooked else 'rank 0'} watched, "
          f"{len(found)} incident(s) {found}", flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--unhooked", action="store_true", help="no hook: the job's step times come from the "
                        "Megatron-style lines rank 0 prints into the job's log file, which attach finds by itself")
    parser.add_argument("--stacks", type=float, default=0.0, help="unprepared jobs, a stack burst every S seconds")
    parser.add_argument("--rise", type=float, default=0.2, help="--watch-rise")
    args = parser.parse_args()
    total = 0
    with tempfile.TemporaryDirectory(prefix="watch-soak-") as name:
        for index in range(args.jobs):
            total += len(soak(Path(name), index, args))
    print(f"{total} incident(s) in {args.jobs} clean job(s) of about {args.minutes:g} minute(s) each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
