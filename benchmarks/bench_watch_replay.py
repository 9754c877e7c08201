"""The steps sampler's and the watcher's own CPU in `attach --watch`'s steady state, without a job.

Promise: replays ``--ranks`` hooked ranks writing ``--steps-per-s`` step records a second each (steady
~85 ms steps, 2% jitter, `--jitter` a load that changes every second, end times at "now" so no hang fires) into hook spool files, and runs the steps
sampler (copying the records into a run directory and handing them to the watcher through a `StepFeed`,
as `attach --watch` wires them) and the watcher (the analyzers' online rules) once per replayed second; it
prints each one's thread CPU per second, after ``--warmup`` seconds (arming, the baseline). ``--files``
makes the watcher read the step files itself instead (no feed), as before the feed existed. No job, no
other sampler: the share that grows with step records a second, measured apart from the job's load.
``--offline-change-point`` confirms with the offline change point instead of its lean twin (what the twin saves).

    .venv/bin/python benchmarks/bench_watch_replay.py --ranks 8 --steps-per-s 12 --seconds 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perftracker.analyzers.online.diagnosis import AnalyzerDiagnosis
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import LineTail
from perftracker.live.samplers.step_state import StepFeed
from perftracker.live.samplers.steps_sampler import StepsSampler, _HookedRank
from perftracker.live.watch.watcher import WatchOptions, WatchSampler
from perftracker.rundir import step_file

STEP_NS = 85_000_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps-per-s", type=int, default=12)
    parser.add_argument("--seconds", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--jitter", type=float, default=0.0, help="a load that changes every second and slows every "
                        "rank's steps alike, by |N(0, jitter)| (0.3: a loaded machine, on which the degradation rule's "
                        "trigger fires often)")
    parser.add_argument("--files", action="store_true", help="the watcher reads the step files (no feed)")
    parser.add_argument("--offline-change-point", action="store_true", help="the degradation rule confirms with the "
                        "offline change point (pandas) instead of its lean twin analyzers/online/change_point.py")
    args = parser.parse_args()
    if args.offline_change_point:
        import pandas as pd

        from perftracker.analyzers.online import step_rules
        from perftracker.analyzers.stragglers.degradation import change_point

        step_rules.change_point = lambda y, steps: change_point(pd.Series(y, index=steps))  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix="bench-watch-replay-"))
    workers = [Worker(rank=r, local_rank=r, pid=os.getpid(), host="h", cmdline="train.py", run_id="",
                      world_size=args.ranks, parent=1) for r in range(args.ranks)]
    ctx = LiveContext(run_dir=tmp / "run", job=Job(launcher_pid=os.getpid(), workers=workers), host="h",
                      diagnosis=AnalyzerDiagnosis())
    feed = None if args.files else StepFeed()
    steps = StepsSampler(find_outputs=False, feed=feed)
    spools = [tmp / "spool" / f"rank-{r}.jsonl" for r in range(args.ranks)]
    for rank, spool in enumerate(spools):
        spool.parent.mkdir(parents=True, exist_ok=True)
        spool.touch()
        steps.hooked[rank] = _HookedRank(rank, LineTail(spool), step_file(ctx.run_dir, rank))
    watch = WatchSampler(options=WatchOptions(baseline_seconds=0, profile_seconds=0), feed=feed)
    watch.start(ctx)
    step = 0

    def one_second() -> None:
        nonlocal step
        t_ns = time.time_ns() - args.steps_per_s * STEP_NS
        load = 1 + abs(random.gauss(0, args.jitter))  # the machine's load this second: every rank's steps alike
        for _ in range(args.steps_per_s):
            dur = int(STEP_NS * load * (1 + random.gauss(0, 0.02)))
            for rank, spool in enumerate(spools):
                with open(spool, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"rank": rank, "step": step, "start_ns": t_ns, "end_ns": t_ns + dur,
                                          "host": "h", "pid": os.getpid()}, separators=(",", ":")) + "\n")
            t_ns += dur
            step += 1

    for _ in range(args.warmup):
        one_second()
        steps.sample(ctx)
        watch.sample(ctx)
    steps_cpu = watch_cpu = 0.0
    for _ in range(args.seconds):
        one_second()
        began = time.thread_time()
        steps.sample(ctx)
        between = time.thread_time()
        watch.sample(ctx)
        steps_cpu, watch_cpu = steps_cpu + between - began, watch_cpu + time.thread_time() - between
    watch.stop(ctx)
    steps.stop(ctx)
    per_s = (steps_cpu + watch_cpu) / args.seconds
    print(f"{args.ranks} ranks x {args.steps_per_s} records/s ({'files' if args.files else 'feed'}): steps sampler "
          f"{1e3 * steps_cpu / args.seconds:.2f} ms/s, watcher {1e3 * watch_cpu / args.seconds:.2f} ms/s = "
          f"{100 * per_s:.3f}% of one core; armed {watch.state.armed}, {len(watch.state.incidents)} incident(s); "
          f"load average {[round(x, 2) for x in os.getloadavg()]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
