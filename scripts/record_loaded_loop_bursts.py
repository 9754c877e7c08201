"""Record real sampled-stack bursts of the live test's ~120 ms sleeping loop (tests/live/samplers/test_stack_steps.py) on a
machine made busy on purpose, and keep those whose period the estimator gets wrong.

Promise: ``python scripts/record_loaded_loop_bursts.py OUT [--busy N] [--bursts K] [--seconds S] [--rate R]
[--keep M] [--preempt S]`` starts N busy-looping Python processes (default 5), the test's loop (90 ms in ``data``, 30 ms in
``forward``, both sleeping; with --preempt, SIGSTOPped at random moments for up to S s, as a process
descheduled on a crowded machine; it also writes each iteration's end time to a file: the truth), and records K bursts
exactly as the watcher's stack-steps sampler does (`live/samplers/profile_sampler.py` `BurstRound`). It prints, per burst, the
estimate (`analyzers/online/step_period.py`) against the loop's own mean iteration time over the burst, and copies
up to M bursts off by more than 6% to ``OUT/loaded-<k>-rank0.json.gz``, adding their truth to ``OUT/truth.json``
(the format of tests/fixtures/stack_bursts). Every process started is killed before the script exits.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perftracker.analyzers.online.step_period import estimate_period
from perftracker.collectors.stacks.chrometrace import read_burst
from perftracker.live.attach.discovery import Worker
from perftracker.live.samplers.profile_sampler import BurstRound
from perftracker.live.samplers.stacks import find_pyspy

LOOP = """
import sys, time
out = open(sys.argv[1], "w", buffering=1)
def forward():
    time.sleep(0.03)
def data():
    time.sleep(0.09)
print("ready", flush=True)
while True:
    data()
    forward()
    out.write(f"{time.time_ns()}\\n")
"""
BUSY = "while True: pass"


def preempt(pid: int, most_s: float, until: threading.Event, seed: int) -> None:
    """SIGSTOP `pid` for a random 10 ms..`most_s` at random moments (a descheduled process on a crowded machine)."""
    rng = random.Random(seed)
    try:
        while not until.wait(rng.uniform(0.02, 0.3)):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(rng.uniform(0.01, most_s))
            os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--busy", type=int, default=5)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--preempt", type=float, default=0.0, help="also stop the loop at random for up to S s")
    args = parser.parse_args()
    pyspy = find_pyspy()
    assert pyspy is not None, "py-spy is not installed"
    args.out.mkdir(parents=True, exist_ok=True)
    truth_file = args.out / "truth.json"
    truth: dict[str, object] = json.loads(truth_file.read_text()) if truth_file.is_file() else {}
    work = Path(tempfile.mkdtemp(prefix="loaded-loop-"))
    ends = work / "ends.txt"
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    loop = subprocess.Popen([sys.executable, "-c", LOOP, str(ends)], stdout=subprocess.PIPE)
    procs.append(loop)
    kept = 0
    off = 0
    until = threading.Event()
    try:
        assert loop.stdout is not None and loop.stdout.readline().startswith(b"ready")
        if args.preempt > 0:
            threading.Thread(target=preempt, args=(loop.pid, args.preempt, until, 0), daemon=True).start()
        time.sleep(1)
        worker = Worker(0, 0, loop.pid, "", "", "", 1, 1)
        for k in range(args.bursts):
            rnd = BurstRound(pyspy, args.seconds, args.rate, work)
            rnd.start([worker])
            while not rnd.done():
                time.sleep(0.2)
            end_ns = rnd.started_ns + int(args.seconds * 1e9)
            times = [int(x) for x in ends.read_text().split()]
            inside = [b for a, b in zip(times, times[1:]) if rnd.started_ns <= a and b <= end_ns]
            mean = (inside[-1] - times[times.index(inside[0]) - 1]) / len(inside) / 1e9 if inside else None
            rec = rnd.recorders[0]
            found = estimate_period(read_burst(rec.out, 0, args.rate))
            got = found.period_s if found else None
            bad = got is None or mean is None or abs(got / mean - 1) > 0.06
            off += bad
            print(f"burst {k}: mean {mean} estimate {got} depth {found.depth if found else None} "
                  f"conf {found.confidence if found else None} {'OFF' if bad else 'ok'}", flush=True)
            if bad and got is not None and mean is not None and kept < args.keep:
                name = f"loaded-{kept}-rank0.json.gz"
                with open(rec.out, "rb") as src, gzip.open(args.out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                truth[name] = {"scenario": "loaded", "rank": 0, "rate_hz": args.rate, "seconds": args.seconds,
                               "mean_step_s": mean, "steps": len(inside)}
                kept += 1
            rec.out.unlink(missing_ok=True)
            time.sleep(0.5)
    finally:
        until.set()
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    truth_file.write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    print(f"{off} of {args.bursts} bursts off by more than 6%; kept {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
