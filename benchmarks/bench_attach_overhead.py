"""Overhead of `perftracker attach` (default settings) on the step time of a real torchrun job.

Promise: runs ``scripts/sample_job.py`` under torchrun (CPU, gloo, ``--nproc`` ranks, ``--steps``
steps, ``--hook`` in *both* arms so the measurement itself is identical) ``--pairs`` times with and
without ``perftracker attach pid:<launcher> --duration 0 --quiet -o <dir>`` (default collectors:
env, logs, GPU, RDMA, stacks every 15 s, steps; analysis after the job ends), interleaved and
alternating which arm goes first. Per run: the median step time of all ranks from the job's own step
files (steps after the first ``--skip``). Printed: per-pair ratios attach/baseline with min/median/max,
and attach's own CPU time (psutil on the attach process and its children while the job ran; plus
the total with the final analysis, from wait4). Results go to ``benchmarks/results/bench_attach_overhead.json``.

    .venv/bin/python benchmarks/bench_attach_overhead.py --pairs 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from sample_job_runner import free_port, job_command, worker_pids

RESULTS = REPO / "benchmarks" / "results" / "bench_attach_overhead.json"


def _tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of `proc` and its live children (reaped children are in children_user/system)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + (t.children_user + t.children_system if p is proc else 0.0)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def median_step_ms(run_dir: Path, skip: int) -> tuple[float, int]:
    durs = []
    for path in sorted((run_dir / "steps").glob("rank-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec["step"] >= skip:
                durs.append((rec["end_ns"] - rec["start_ns"]) / 1e6)
    return statistics.median(durs), len(durs)


def one_run(args: argparse.Namespace, attach: bool, tmp: Path, index: int) -> dict[str, Any]:
    run_dir = tmp / f"run-{index}-{'attach' if attach else 'base'}"
    job_args = ["--steps", str(args.steps), "--profile-steps", "0", "--hook", "--step-sleep", str(args.step_sleep),
                "--width", str(args.width), "--batch", str(args.batch)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    cmd = job_command(run_dir, args.nproc, free_port(), job_args)
    job = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    result: dict[str, Any] = {"attach": attach}
    att: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while len(worker_pids(job.pid)) < args.nproc and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.05)
        if attach:
            att = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{job.pid}", "--duration",
                                    "0", "--quiet", "-o", str(tmp / f"attach-{index}")],
                                   cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            proc = psutil.Process(att.pid)
            cpu_attached = 0.0
            while job.poll() is None:
                cpu_attached = max(cpu_attached, _tree_cpu(proc))
                time.sleep(0.25)
            _, status, usage = os.wait4(att.pid, 0)
            att.returncode = os.waitstatus_to_exitcode(status)
            result.update(attach_cpu_while_job_s=round(cpu_attached, 3),
                          attach_cpu_total_s=round(usage.ru_utime + usage.ru_stime, 3), attach_rc=att.returncode)
        job.wait(timeout=args.timeout)
    finally:
        for p in (job, att):
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL) if p is job else p.kill()
                except ProcessLookupError:
                    pass
                p.wait()
    if job.returncode != 0:
        raise RuntimeError(f"job failed ({job.returncode}): {' '.join(cmd)}")
    result["median_step_ms"], result["steps_counted"] = median_step_ms(run_dir, args.skip)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out (warm-up)")
    parser.add_argument("--step-sleep", type=float, default=0.03, help="seconds of non-CPU work per step")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-attach-") as name:
        tmp = Path(name)
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            got = {arm: one_run(args, arm, tmp, 2 * pair + i) for i, arm in enumerate(order)}
            ratio = got[True]["median_step_ms"] / got[False]["median_step_ms"]
            ratios.append(ratio)
            runs += [dict(got[False], pair=pair), dict(got[True], pair=pair)]
            print(f"pair {pair}: base {got[False]['median_step_ms']:.2f} ms, attach {got[True]['median_step_ms']:.2f} ms"
                  f", ratio {ratio:.4f}, attach CPU {got[True]['attach_cpu_while_job_s']:.2f} s while attached "
                  f"({got[True]['attach_cpu_total_s']:.2f} s with analysis)", flush=True)
    attached = [r for r in runs if r["attach"]]
    summary = {
        "config": vars(args), "cpu_count": os.cpu_count(), "runs": runs,
        "ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
        "attach_cpu_while_job_s_median": statistics.median(r["attach_cpu_while_job_s"] for r in attached),
        "attach_cpu_total_s_median": statistics.median(r["attach_cpu_total_s"] for r in attached),
    }
    ratio = summary["ratio"]
    print(f"step time ratio attach/baseline over {args.pairs} pair(s): median {ratio['median']:.4f} "
          f"(min {ratio['min']:.4f}, max {ratio['max']:.4f}); slowdown {100 * (ratio['median'] - 1):+.2f} %")
    print(f"attach CPU: {summary['attach_cpu_while_job_s_median']:.2f} s while the job ran (median), "
          f"{summary['attach_cpu_total_s_median']:.2f} s including the final analysis")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
