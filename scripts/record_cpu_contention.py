"""Record the ranks' scheduler accounting of a real job in clean windows and under CPU hogs, as fixtures.

Promise: ``python scripts/record_cpu_contention.py [--out tests/fixtures/cpu_contention] [--hogs 3]`` runs the
2-rank gloo sample job (CPU, ~50 ms steps), takes scheduler snapshots of both ranks
(`collectors/counters/sched.snapshot_record`, the records an incident's capture writes) around one baseline
window, then `--clean` later clean windows, then one window while `--hogs` busy-looping processes run
beside the job, each `--seconds` long, and writes each window as `<out>/<window>/sched/<host>.sched.jsonl`
(the baseline under `<out>/baseline/baseline/sched/`, as an incident's evidence holds it), with
`<out>/recorded.json` (the machine's load average at each window). tests/online/test_cpu_contention.py judges
every clean window and the hog window against the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from sample_job_runner import free_port, job_command, worker_pids  # noqa: E402

from perftracker.collectors.counters.sched import load1, snapshot_record  # noqa: E402

HOST = "node-a"  # a fixed name: the fixture names no machine


def _window(pids: dict[int, int], folder: Path, seconds: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{HOST}.sched.jsonl", "w", encoding="utf-8") as out:
        for _ in range(2):
            now = time.time_ns()
            for rank, pid in sorted(pids.items()):
                rec = snapshot_record(HOST, rank, pid, now)
                if rec is not None:
                    out.write(json.dumps(rec) + "\n")
            time.sleep(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "cpu_contention")
    parser.add_argument("--hogs", type=int, default=3)
    parser.add_argument("--clean", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cpu-contention-"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    job_args = ["--steps", "100000", "--profile-steps", "0", "--step-sleep", "0.04", "--width", "64", "--batch", "16"]
    job = subprocess.Popen(job_command(tmp / "job", 2, free_port(), job_args), cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    hogs: list[subprocess.Popen[bytes]] = []
    loads: dict[str, float | None] = {}
    try:
        while len(worker_pids(job.pid)) < 2:
            time.sleep(0.2)
        pids = worker_pids(job.pid)
        time.sleep(5)  # past the job's start-up
        shutil.rmtree(args.out, ignore_errors=True)
        _window(pids, args.out / "baseline" / "baseline" / "sched", args.seconds)
        loads["baseline"] = load1()
        for k in range(1, args.clean + 1):
            _window(pids, args.out / f"clean-{k}" / "sched", args.seconds)
            loads[f"clean-{k}"] = load1()
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
        time.sleep(1)
        _window(pids, args.out / "hog" / "sched", args.seconds)
        loads["hog"] = load1()
    finally:
        for hog in hogs:
            hog.kill()
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    (args.out / "recorded.json").write_text(json.dumps({"hogs": args.hogs, "seconds": args.seconds, "cpus":
                                                        os.cpu_count(), "load1": loads}, indent=1) + "\n")
    print(f"recorded into {args.out}: {json.dumps(loads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
