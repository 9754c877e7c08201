"""Overhead of `perftracker attach --watch` on a real torchrun job: the watcher's own CPU and the step time.

Promise: runs ``scripts/sample_job.py`` under torchrun (CPU, gloo, ``--nproc`` ranks, ``--steps`` steps,
``--hook`` in both arms) ``--pairs`` times with and without ``perftracker attach pid:<launcher> --watch
--no-analyze --quiet`` (the watch's steady state: steps, NVML/RDMA every 10 s, net every 30 s, a stack round
every 60 s only while no step comes, the online rules every second, one baseline recording once armed), interleaved and alternating
which arm goes first. Per pair: the step-time ratio watch/baseline (median step of all ranks, steps after
``--skip``); per watched run: attach's own CPU time (its process and children, psutil, while the job ran) as
a share of one core and per rank, in the steady state (from ``--settle`` seconds after attaching, and
BASELINE_S after the baseline recording began, to the job's end, leaving out the intervals in which an
incident was being captured or analyzed and CAPTURE_MARGIN_S after: a job slowed by a loaded machine does
open one) and in all, with the
load average. Results in ``benchmarks/results/bench_watch_overhead.json``.

    .venv/bin/python benchmarks/bench_watch_overhead.py --pairs 3 --nproc 8
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_attach_overhead import _tree_cpu, median_step_ms
from sample_job_runner import free_port, job_command, worker_pids

RESULTS = REPO / "benchmarks" / "results" / "bench_watch_overhead.json"
BASELINE_S = 20.0  # the baseline recording (10 s of py-spy, which then writes its output) is start-up, not the steady state
CAPTURE_MARGIN_S = 5.0  # an incident's capture and analysis, and this long after, are not the steady state


def _capturing(watch_dir: Path) -> bool:
    """Is an incident being captured or analyzed, or was one finished less than CAPTURE_MARGIN_S ago?"""
    for folder in (watch_dir / "incidents").glob("*-*"):
        if folder.name == "baseline":
            continue
        record = folder / "incident.json"
        try:
            state = json.loads(record.read_text(encoding="utf-8")).get("state")
            if state in ("capturing", "analyzing") or time.time() - record.stat().st_mtime < CAPTURE_MARGIN_S:
                return True
        except (OSError, ValueError):
            return True  # being written
    return False


def _incidents(watch_dir: Path) -> int:
    """Incidents opened so far (the baseline is not one)."""
    return sum(1 for p in (watch_dir / "incidents").glob("*-*") if p.name != "baseline")


def _session_cpu(watch_dir: Path) -> dict[str, Any]:
    """The whole session's CPU as attach's host manifest says it (`cpu_s`: per collector, process, children)."""
    for path in (watch_dir / "manifests").glob("*.json"):
        return dict(json.loads(path.read_text(encoding="utf-8")).get("cpu_s", {}))
    return {}


def _threads_cpu(pid: int) -> dict[int, float]:
    """OS thread id -> user + system CPU seconds of each thread of `pid` (/proc; empty elsewhere)."""
    out: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            text = stat.read_bytes()
        except OSError:
            continue
        fields = text[text.rfind(b")") + 2:].split()
        out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def _thread_names(pid: int) -> dict[int, str]:
    """OS thread id -> Python thread name, from one non-blocking py-spy dump (empty without py-spy)."""
    pyspy = Path(sys.executable).parent / "py-spy"
    try:
        text = subprocess.run([str(pyspy), "dump", "--pid", str(pid), "--nonblocking"], capture_output=True,
                              text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {int(m.group(1)): m.group(2) for m in re.finditer(r'^Thread (\d+) \([a-z]+\): "([^"]*)"', text, re.M)}


def one_run(args: argparse.Namespace, watch: bool, tmp: Path, index: int) -> dict[str, Any]:
    run_dir = tmp / f"run-{index}-{'watch' if watch else 'base'}"
    job_args = ["--steps", str(args.steps), "--profile-steps", "0", "--hook", "--step-sleep", str(args.step_sleep),
                "--width", str(args.width), "--batch", str(args.batch)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    job = subprocess.Popen(job_command(run_dir, args.nproc, free_port(), job_args), cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    result: dict[str, Any] = {"watch": watch}
    att: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while len(worker_pids(job.pid)) < args.nproc and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.05)
        if watch:
            att = subprocess.Popen([sys.executable, "-m", "perftracker", "attach", f"pid:{job.pid}", "--watch",
                                    "--no-analyze", "--quiet", "-o", str(tmp / f"watch-{index}")],
                                   cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            proc = psutil.Process(att.pid)
            watch_dir = tmp / f"watch-{index}"
            began, cpu = time.monotonic(), 0.0
            settled: float | None = None  # when start-up and the baseline were over
            baseline_at: float | None = None
            last = (began, 0.0)
            steady_cpu = steady_s = 0.0  # summed over the intervals with no incident captured at either end
            was_free = False
            names: dict[int, str] = {}
            last_threads: dict[int, float] = {}
            steady_threads: dict[int, float] = {}  # OS thread id -> its CPU over the same intervals
            own_steady = 0.0  # the process's own part of steady_cpu (the rest: children, py-spy)
            while job.poll() is None:
                threads = _threads_cpu(att.pid)
                now = (time.monotonic(), max(cpu, _tree_cpu(proc)))
                cpu = now[1]
                if baseline_at is None and (watch_dir / "incidents" / "baseline").is_dir():
                    baseline_at = now[0]
                if (settled is None and now[0] - began >= args.settle and baseline_at is not None
                        and now[0] - baseline_at >= BASELINE_S):
                    settled = now[0]
                    names = _thread_names(att.pid)
                free = settled is not None and not _capturing(watch_dir)
                if free and was_free:
                    steady_cpu, steady_s = steady_cpu + now[1] - last[1], steady_s + now[0] - last[0]
                    for tid, spent in threads.items():
                        delta = spent - last_threads.get(tid, spent)
                        steady_threads[tid] = steady_threads.get(tid, 0.0) + delta
                        own_steady += delta
                last, was_free, last_threads = now, free, threads
                time.sleep(0.5)
            wall = time.monotonic() - began
            if steady_s < 5:
                raise RuntimeError("no steady state: the job ended before the watcher settled, or incidents were "
                                   "being captured all along: give more --steps")
            job.wait(timeout=args.timeout)
            att.wait(timeout=180)
            result.update(watch_cpu_s=round(cpu, 3), watched_s=round(wall, 1),
                          steady_cpu_s=round(steady_cpu, 3), steady_s=round(steady_s, 1),
                          core_pct=round(100 * steady_cpu / steady_s, 3),
                          core_pct_per_rank=round(100 * steady_cpu / steady_s / args.nproc, 4),
                          steady_own_cpu_s=round(own_steady, 3),
                          steady_threads_ms_per_s={names.get(tid, str(tid)): round(1e3 * spent / steady_s, 3)
                                                   for tid, spent in sorted(steady_threads.items(),
                                                                            key=lambda kv: -kv[1]) if spent > 0},
                          incidents=_incidents(watch_dir), load_avg=[round(x, 2) for x in os.getloadavg()],
                          session_cpu_s=_session_cpu(watch_dir))
        job.wait(timeout=args.timeout)
    finally:
        for p in (job, att):
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL) if p is job else p.kill()
                except ProcessLookupError:
                    pass
                p.wait()
    result["median_step_ms"], result["steps_counted"] = median_step_ms(run_dir, args.skip)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--watch-only", action="store_true", help="only the watched arm (the watcher's CPU; no "
                        "step-time ratio): quicker, for measuring the cost alone")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after attaching before the steady "
                        "state is measured (start-up: imports, the first scan, the baseline recording)")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as name:
        tmp = Path(name)
        for pair in range(args.pairs):
            order = (True,) if args.watch_only else (False, True) if pair % 2 == 0 else (True, False)
            got = {arm: one_run(args, arm, tmp, 2 * pair + i) for i, arm in enumerate(order)}
            w = got[True]
            if args.watch_only:
                head = f"run {pair}: watch {w['median_step_ms']:.2f} ms steps"
                runs.append(dict(w, pair=pair))
            else:
                ratios.append(w["median_step_ms"] / got[False]["median_step_ms"])
                runs += [dict(got[False], pair=pair), dict(w, pair=pair)]
                head = (f"pair {pair}: base {got[False]['median_step_ms']:.2f} ms, watch {w['median_step_ms']:.2f} ms, "
                        f"ratio {ratios[-1]:.4f}")
            print(f"{head}; watcher CPU {w['watch_cpu_s']:.2f} s in all over {w['watched_s']:.0f} s; "
                  f"steady state {w['steady_cpu_s']:.2f} s over {w['steady_s']:.0f} s = {w['core_pct']:.3f}% of a core "
                  f"({w['core_pct_per_rank']:.4f}% per rank), "
                  f"{w['incidents']} incident(s) (their captures left out); load average {w['load_avg']}; the session's "
                  f"cpu_s {json.dumps(w['session_cpu_s'])}; steady state per thread (ms a second) "
                  f"{json.dumps(w['steady_threads_ms_per_s'])}, the process itself {w['steady_own_cpu_s']:.2f} s", flush=True)
    watched = [r for r in runs if r["watch"]]
    summary: dict[str, Any] = {"config": vars(args), "cpu_count": os.cpu_count(), "runs": runs,
                               "core_pct_median": statistics.median(r["core_pct"] for r in watched)}
    if ratios:
        summary["ratio"] = {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}
        print(f"step time ratio watch/baseline: median {statistics.median(ratios):.4f} (min {min(ratios):.4f}, "
              f"max {max(ratios):.4f})")
    print(f"watcher {summary['core_pct_median']:.3f}% of one core for {args.nproc} ranks (median)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
