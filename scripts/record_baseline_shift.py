"""Record the fixtures of the `baseline_shift` analyzer from real unhooked jobs watched by `attach --watch`.

Promise: ``python scripts/record_baseline_shift.py OUT [--mode slow|clean] [--windows K] [--seconds S]`` runs
a 2-rank torchrun job of ``scripts/sample_job.py`` (CPU, gloo, ~50 ms steps, no hook: its step times are the
Megatron-style lines rank 0 prints, `--print-steps`, which the watcher finds in the job's stdout) and
``perftracker attach --watch --incident-seconds S`` on it. Once the watcher's baseline window is recorded:

* ``slow``: rank 1 is SIGSTOPped `--stopped` s of every 100 ms from outside; when the degradation incident is
  analyzed, its evidence's stacks (``profiles/``, ``baseline/profiles/``) and step records (``steps/``) are
  copied to ``OUT/``, and its findings' titles and ranks printed (tests/fixtures/baseline_shift/sigstop-<k>);
* ``clean``: nothing is slowed; the baseline is copied to ``OUT/baseline/profiles/`` and K later windows of S
  seconds of both ranks' stacks (py-spy record, the watcher's options) are recorded into
  ``OUT/window-<k>/profiles/`` (tests/fixtures/baseline_shift/clean: the false-positive measurement, every
  clean window against the baseline).

The fixtures were recorded with ``--rise 0.8 --stopped 0.08`` on a 2-core machine loaded by other test runs
(load average 14-19), where the job-wide step times of a clean job wandered by 30-50% and fired the default
rule (``--watch-rise 0.2``) before anything was slowed.

Exit 0 when the fixtures were written, 1 otherwise (said on stderr).
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
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from sample_job_runner import duty_cycle, free_port, job_command, worker_pids

from perftracker.live.samplers.stacks import find_pyspy
from perftracker.rundir import host_name

RATE_HZ = 20


def wait_for(path_glob: Path, pattern: str, timeout: float, test: object = None) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(path_glob.glob(pattern)):
            if test is None or test(path):  # type: ignore[operator]
                return path
        time.sleep(0.5)
    raise TimeoutError(f"nothing like {path_glob / pattern} within {timeout:.0f} s")


def record_window(pids: dict[int, int], folder: Path, seconds: float) -> None:
    """Both ranks' stacks side by side for `seconds`, as the watcher records them."""
    pyspy = find_pyspy()
    assert pyspy is not None
    folder.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank, pid in sorted(pids.items()):
        out = folder / f"rank-{rank}.txt"
        cmd = [pyspy, "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--duration", str(round(seconds)),
               "--nonblocking", "--idle", "--threads", "--format", "raw", "--output", str(out)]
        procs.append((rank, pid, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                      time.time_ns()))
    for rank, pid, proc, started in procs:
        proc.wait()
        meta = {"rank": rank, "pid": pid, "host": "vm", "rate_hz": RATE_HZ, "duration_s": seconds,
                "started_ns": started}
        (folder / f"rank-{rank}.json").write_text(json.dumps(meta) + "\n")


def copy_profiles(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("rank-*.*")):
        shutil.copy(path, dest / path.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mode", choices=("slow", "clean"), default="slow")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rise", type=float, default=0.2, help="--watch-rise (a loaded machine's own noise may "
                        "need more: its job-wide steps wander by 30-50%%)")
    parser.add_argument("--stopped", type=float, default=0.07, help="seconds rank 1 is stopped every 100 ms")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="baseline-shift-"))
    run_dir, watch = tmp / "job", tmp / "watch"
    job_args = ["--steps", "100000", "--profile-steps", "0", "--print-steps", "--step-sleep", "0.04", "--width", "64",
                "--batch", "16"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    log = open(tmp / "job.log", "wb")  # noqa: SIM115
    job = subprocess.Popen(job_command(run_dir, 2, free_port(), job_args), cwd=REPO, env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    attach = None
    stop = threading.Event()
    try:
        while len(worker_pids(job.pid)) < 2 and job.poll() is None:
            time.sleep(0.2)
        pids = worker_pids(job.pid)
        time.sleep(0.5)  # attached at once, as tests/live/watch/test_watch.py: its own start-up load is then part of the best
        attach = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{job.pid}", "-o", str(watch),
                                   "--quiet", "--watch", "--no-analyze", "--incident-seconds", str(args.seconds),
                                   "--watch-rise", str(args.rise)],
                                  cwd=REPO, stdout=open(tmp / "attach.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        baseline = watch / "incidents" / f"baseline-{host_name()}"
        wait_for(baseline, "baseline.json", 60 + 2 * args.seconds)
        print(f"baseline ready: {sorted(p.name for p in (baseline / 'profiles').glob('*'))}", flush=True)
        early = sorted(p.parent.name for p in (watch / "incidents").glob("*/incident.json"))
        if early:
            raise TimeoutError(f"an incident opened before anything was slowed: {early}")
        if args.mode == "clean":
            copy_profiles(baseline / "profiles", args.out / "baseline" / "profiles")
            for k in range(args.windows):
                record_window(pids, args.out / f"window-{k}" / "profiles", args.seconds)
                print(f"clean window {k} recorded", flush=True)
            found = sorted(p.parent.name for p in (watch / "incidents").glob("*/incident.json"))
            print(f"incidents during the clean windows: {found}", flush=True)
            return 0
        printed = [line for line in (tmp / "job.log").read_text(errors="replace").splitlines() if "iteration" in line]
        print(f"rank 1 slowed from now on, after: {printed[-1].strip() if printed else '?'}", flush=True)
        duty_cycle(pids[1], args.stopped, 0.1, stop)

        def analyzed(path: Path) -> bool:
            record = json.loads(path.read_text())
            return bool(record["kind"] == "degradation" and record["state"] in ("done", "interrupted"))

        incident = wait_for(watch / "incidents", "*/incident.json", 90 + 2 * args.seconds, analyzed).parent
        stop.set()
        record = json.loads((incident / "incident.json").read_text())
        print(f"incident {incident.name}: step {record['step']}, named ranks {record['named_ranks']}, "
              f"notes {record['notes']}", flush=True)
        for finding in json.loads((incident / "findings.json").read_text())["findings"]:
            print(f"  {finding['analyzer']} {finding['severity']} ranks={finding['ranks']}: {finding['title']}")
        dest = args.out
        copy_profiles(incident / "evidence" / "profiles", dest / "profiles")
        copy_profiles(incident / "evidence" / "baseline" / "profiles", dest / "baseline" / "profiles")
        for steps in sorted((incident / "evidence" / "steps").glob("*.jsonl")):
            (dest / "steps").mkdir(parents=True, exist_ok=True)
            shutil.copy(steps, dest / "steps" / steps.name)
        return 0
    except TimeoutError as exc:
        print(f"record_baseline_shift: {exc}; see {tmp}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        if attach is not None and attach.poll() is None:
            attach.send_signal(signal.SIGINT)
            try:
                attach.wait(timeout=120)
            except subprocess.TimeoutExpired:
                attach.kill()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


if __name__ == "__main__":
    sys.exit(main())
