"""Record the fixtures of the `waited_rank` analyzer from a real unhooked 4-rank job watched by `attach --watch`.

Promise: ``python scripts/record_waited_rank.py OUT [--mode slow|clean] [--rank R] [--windows K] [--seconds S]``
runs a 4-rank torchrun job of ``scripts/sample_job.py`` (CPU, gloo, DDP, ~40 ms steps, no hook: its step times
are the Megatron-style lines rank 0 prints, `--print-steps`, which the watcher finds in the job's stdout) and
``perftracker attach --watch --incident-seconds S --watch-rise RISE`` on it. Once the watcher's baseline window
is recorded:

* ``slow``: rank R (2 by default) is SIGSTOPped `--stopped` s of every 100 ms from outside; when the
  degradation incident is analyzed, its evidence's scheduler records (``sched/``, ``baseline/sched/``), stacks
  (``profiles/``, ``baseline/profiles/``), step records (``steps/``) and manifest are copied to ``OUT/`` and
  its findings' titles and ranks printed;
* ``clean``: nothing is slowed; K later windows of S seconds of every rank's main-thread states and scheduler
  accounting, sampled as the watcher samples them (`collectors/counters/sched.py` states every 50-100 ms,
  jittered, and its accounting at both ends), go to ``OUT/window-<k>/sched/`` and the baseline's
  to ``OUT/window-<k>/baseline/sched/``, with the watcher's step records so far (``steps/``, their last 256 KB,
  as an incident keeps them) (each window is then an incident's evidence with nothing wrong).

Exit 0 when the fixtures were written, 1 otherwise (said on stderr).
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

import psutil
from sample_job_runner import duty_cycle, free_port, job_command, worker_pids

from perftracker.collectors.counters.sched import snapshot_record, state_record
from perftracker.live.watch.incidents import STATE_EVERY_S, STEPS_TAIL_BYTES, copy_tail
from perftracker.rundir import host_name

JOB_ARGS = ["--steps", "100000", "--profile-steps", "0", "--print-steps", "--step-sleep", "0.03", "--width", "64",
            "--batch", "16"]


def wait_for(folder: Path, pattern: str, timeout: float, test: object = None) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(folder.glob(pattern)):
            if test is None or test(path):  # type: ignore[operator]
                return path
        time.sleep(0.5)
    raise TimeoutError(f"nothing like {folder / pattern} within {timeout:.0f} s")


def record_states(pids: dict[int, int], folder: Path, seconds: float) -> None:
    """Every rank's states through `seconds`, and its scheduler accounting at both ends, as the watcher does."""
    folder.mkdir(parents=True, exist_ok=True)
    host = host_name()

    def snap() -> list[str]:
        now = time.time_ns()
        return [json.dumps(r) + "\n" for rank, pid in sorted(pids.items())
                if (r := snapshot_record(host, rank, pid, now)) is not None]

    sched = snap()
    states: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = time.time_ns()
        states.extend(json.dumps(r) + "\n" for rank, pid in sorted(pids.items())
                      if (r := state_record(host, rank, pid, now)) is not None)
        time.sleep(random.uniform(*STATE_EVERY_S))  # noqa: S311
    sched += snap()
    (folder / f"{host}.sched.jsonl").write_text("".join(sched))
    (folder / f"{host}.states.jsonl").write_text("".join(states))


def kill_tree(job: subprocess.Popen[bytes]) -> None:
    """The launcher and every worker (the workers run in sessions of their own: killpg alone leaves them)."""
    try:
        tree = [psutil.Process(job.pid), *psutil.Process(job.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for proc in tree:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)
    job.wait()


def copy_tree(src: Path, dest: Path, pattern: str = "*") -> None:
    for path in sorted(src.glob(pattern)):
        if path.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest / path.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mode", choices=("slow", "clean"), default="slow")
    parser.add_argument("--rank", type=int, default=2, help="the rank slowed from outside (slow mode)")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rise", type=float, default=0.6, help="--watch-rise")
    parser.add_argument("--stopped", type=float, default=0.06, help="seconds the rank is stopped every 100 ms")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="waited-rank-"))
    run_dir, watch = tmp / "job", tmp / "watch"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    log = open(tmp / "job.log", "wb")  # noqa: SIM115
    job = subprocess.Popen(job_command(run_dir, 4, free_port(), JOB_ARGS), cwd=REPO, env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    attach = None
    stop = threading.Event()
    try:
        while len(worker_pids(job.pid)) < 4 and job.poll() is None:
            time.sleep(0.2)
        pids = worker_pids(job.pid)
        time.sleep(2.0)
        attach = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{job.pid}", "-o", str(watch),
                                   "--quiet", "--watch", "--no-analyze", "--incident-seconds", str(args.seconds),
                                   "--watch-rise", str(args.rise)],
                                  cwd=REPO, stdout=open(tmp / "attach.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        baseline = watch / "incidents" / f"baseline-{host_name()}"
        wait_for(baseline, "baseline.json", 60 + 2 * args.seconds)
        print("baseline ready", flush=True)
        if args.mode == "clean":
            for k in range(args.windows):
                record_states(pids, args.out / f"window-{k}" / "sched", args.seconds)
                copy_tree(baseline / "sched", args.out / f"window-{k}" / "baseline" / "sched")
                for steps in sorted((watch / "steps").glob("*.jsonl")):  # the step times so far, as an incident's
                    copy_tail(steps, args.out / f"window-{k}" / "steps" / steps.name, STEPS_TAIL_BYTES)
                print(f"clean window {k} recorded", flush=True)
            found = sorted(p.parent.name for p in (watch / "incidents").glob("*/incident.json"))
            print(f"incidents during the clean windows: {found}", flush=True)
            return 0
        duty_cycle(pids[args.rank], args.stopped, 0.1, stop)

        def analyzed(path: Path) -> bool:
            record = json.loads(path.read_text())
            return bool(record["kind"] == "degradation" and record["state"] in ("done", "interrupted"))

        incident = wait_for(watch / "incidents", "*/incident.json", 90 + 2 * args.seconds, analyzed).parent
        stop.set()
        record = json.loads((incident / "incident.json").read_text())
        print(f"incident {incident.name}: step {record['step']}, named ranks {record['named_ranks']}", flush=True)
        for finding in json.loads((incident / "findings.json").read_text())["findings"]:
            print(f"  {finding['analyzer']} {finding['severity']} ranks={finding['ranks']}: {finding['title']}")
        evidence = incident / "evidence"
        for sub in ("sched", "profiles", "steps", "baseline/sched", "baseline/profiles"):
            copy_tree(evidence / sub, args.out / sub)
        shutil.copy(evidence / "manifest.json", args.out / "manifest.json")
        return 0
    except TimeoutError as exc:
        print(f"record_waited_rank: {exc}; see {tmp}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        if attach is not None and attach.poll() is None:
            attach.send_signal(signal.SIGINT)
            try:
                attach.wait(timeout=120)
            except subprocess.TimeoutExpired:
                attach.kill()
        kill_tree(job)


if __name__ == "__main__":
    sys.exit(main())
