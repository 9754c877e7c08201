#!/usr/bin/env python3
"""Straggler analysis at scale: `perftracker analyze` on synthetic N-rank traces with one seeded straggler.

For each size (default 64 and 256 ranks, about 5 MB of trace JSON per rank, gzip-compressed on disk) it
generates traces with `benchmarks/synth.py` into a temporary folder, runs `perftracker analyze <dir> -o <out>
--no-cache` in a subprocess, samples the peak RSS of that process tree every 50 ms, and prints seconds,
events, seconds per million events, peak MB, and whether the straggler finding names the seeded rank (and
how close its clock offsets are to the seeded skews). The temporary folder is removed afterwards.

    .venv/bin/python benchmarks/bench_straggler_scale.py                         # 64 and 256 ranks x 5 MB (slow)
    .venv/bin/python benchmarks/bench_straggler_scale.py --sizes 8 32 --target-mb 1
    .venv/bin/python benchmarks/bench_straggler_scale.py --help

Not run by CI. MB = 10^6 bytes. Results are also written as JSON to benchmarks/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from synth import SynthSpec, generate

HERE = Path(__file__).resolve().parent

RESULTS = HERE / "results" / "bench_straggler_scale.json"
MB = 1e6
GZ_RATIO_BOUND = 0.25  # gzip'd synthetic traces are ~8% of the JSON; plan for 25%
OUTPUT_MARGIN = 500 * MB  # analyze's output folder and scratch Parquet (measured well below this)


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of a process and all its descendants (0 for ones that just exited)."""
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_sampled(cmd: list[str], interval: float, log: Path) -> tuple[int, float, float, int]:
    """(exit code, wall seconds, CPU seconds, peak tree RSS bytes) of `cmd`, output to `log`.

    CPU seconds (user + system of the process and every worker it reaped) do not grow when other jobs
    share the machine, unlike wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "wb") as out:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
        proc = psutil.Process(child.pid)
        peak = 0
        while child.poll() is None:
            peak = max(peak, tree_rss(proc))
            time.sleep(interval)
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return child.returncode, wall, cpu, peak


def straggler_verdict(out_dir: Path, seeded: int, truth: dict[str, Any]) -> dict[str, Any]:
    """Does the straggler finding name the seeded rank? And the offset error against the seeded skews."""
    path = out_dir / "findings.json"
    if not path.exists():
        return {"named": "n/a", "why": "no findings.json"}
    doc = json.loads(path.read_text(encoding="utf-8"))
    found = [f for f in doc.get("findings", []) if f.get("analyzer") == "straggler"]
    if not found:
        return {"named": "n/a", "why": "no straggler finding"}
    alignment = [f for f in found if "offsets_ns" in (f.get("evidence") or {})]
    named: list[int] = sorted({int(r) for f in found if f not in alignment for r in f.get("ranks", [])})
    verdict: dict[str, Any] = {"named": ("yes" if named == [seeded] else
                                         "partly" if seeded in named else "no"), "ranks_named": named,
                               "titles": [f.get("title", "") for f in found if f not in alignment][:3]}
    costs = [f.get("cost", {}).get("seconds_per_step") for f in found if seeded in f.get("ranks", [])
             and f not in alignment]
    if costs and isinstance(costs[0], (int, float)):
        verdict["found_cost_us_per_step"] = round(costs[0] * 1e6, 1)
    if alignment:
        est = {int(k): v / 1000 for k, v in alignment[0]["evidence"]["offsets_ns"].items()}
        skew = {int(k): float(v) for k, v in truth["skew_us"].items() if int(k) in est}
        if est and skew:
            # Both are offsets up to a constant: remove the median difference.
            shift = sorted((est[r] - skew[r]) for r in skew)[len(skew) // 2]
            errors = [abs(est[r] - skew[r] - shift) for r in skew]
            verdict["max_offset_error_us"] = round(max(errors), 3)
    return verdict


def bench_size(ranks: int, args: argparse.Namespace) -> dict[str, Any]:
    seeded = ranks // 3 + 1
    spec = SynthSpec(ranks=ranks, steps=args.steps, seed=args.seed, stragglers={seeded: args.straggler_us},
                     target_mb_per_rank=args.target_mb)
    base = Path(args.tmp) if args.tmp else Path(tempfile.gettempdir())
    need = ranks * args.target_mb * MB * (GZ_RATIO_BOUND if not args.no_gzip else 1.0) + OUTPUT_MARGIN
    free = shutil.disk_usage(base).free
    if free < need:
        print(f"  {ranks} ranks: skipped, needs ~{need / MB:.0f} MB free in {base}, has {free / MB:.0f} MB")
        return {"ranks": ranks, "skipped": f"disk: need {need / MB:.0f} MB, free {free / MB:.0f} MB"}
    root = Path(tempfile.mkdtemp(prefix="perftracker-straggler-bench-", dir=base))
    try:
        t0 = time.perf_counter()
        truth = generate(spec, root / "traces", gzip=not args.no_gzip, truth_path=root / "ground_truth.json")
        gen_s = time.perf_counter() - t0
        on_disk = sum(f.stat().st_size for f in (root / "traces").iterdir())
        print(f"  {ranks} ranks: generated {truth.bytes_json / MB:.0f} MB JSON ({on_disk / MB:.0f} MB on disk), "
              f"{truth.events_complete:,} events, {truth.kernels_per_step} kernels/step in {gen_s:.1f} s; "
              "analyzing ...", flush=True)
        cmd = [sys.executable, "-m", "perftracker", "analyze", str(root / "traces"), "-o", str(root / "out"),
               "--no-cache", "--quiet"]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        rc, wall, cpu, peak = run_sampled(cmd, args.interval, root / "analyze.log")
        log_tail = (root / "analyze.log").read_text(encoding="utf-8", errors="replace")[-2000:]
        truth_doc = json.loads((root / "ground_truth.json").read_text(encoding="utf-8"))
        verdict = straggler_verdict(root / "out", seeded, truth_doc) if rc == 0 else {"named": "n/a",
                                                                                      "why": f"exit {rc}"}
        row = {
            "ranks": ranks, "seeded_rank": seeded, "straggler_us": args.straggler_us,
            "expected_cost_us_per_step": truth.stragglers[seeded].expected_cost_us_per_step,
            "json_mb": round(truth.bytes_json / MB, 1), "disk_mb": round(on_disk / MB, 1),
            "events": truth.events_complete, "generate_s": round(gen_s, 2), "exit_code": rc,
            "seconds": round(wall, 2), "s_per_million_events": round(wall / (truth.events_complete / 1e6), 3),
            "cpu_seconds": round(cpu, 2), "load_avg_1m": round(os.getloadavg()[0], 2),
            "simulated_cost_us_per_step": truth.stragglers[seeded].simulated_cost_us_per_step,
            "peak_mb": round(peak / MB, 1), **verdict,
        }
        if rc != 0:
            row["log_tail"] = log_tail
            print(f"  analyze exited {rc}:\n{log_tail}")
        return row
    finally:
        if args.keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256], help="rank counts (default 64 256)")
    parser.add_argument("--target-mb", type=float, default=5.0, help="MB of trace JSON per rank (default 5)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--straggler-us", type=float, default=2000.0,
                        help="extra compute before every collective on the seeded rank (ranks//3 + 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="analyze --workers (0: its default)")
    parser.add_argument("--interval", type=float, default=0.05, help="RSS sampling interval, seconds")
    parser.add_argument("--tmp", default="", help="where to create the temporary folder (default: $TMPDIR)")
    parser.add_argument("--no-gzip", action="store_true", help="write .json instead of .json.gz")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (prints where)")
    args = parser.parse_args()

    print(f"perftracker straggler scale benchmark: sizes {args.sizes}, ~{args.target_mb} MB JSON per rank, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    rows = [bench_size(n, args) for n in args.sizes]
    print()
    print(f"{'ranks':>6} {'events':>11} {'JSON MB':>8} {'seconds':>8} {'s/M events':>10} {'CPU s':>7} "
          f"{'CPU s/M ev':>10} {'peak MB':>8} {'names seeded rank':>18} {'offset err us':>13} "
          f"{'cost ms/step truth/found':>24}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['ranks']:>6} skipped: {r['skipped']}")
            continue
        named = r["named"] if r["named"] == "n/a" else f"{r['named']} {r.get('ranks_named', [])}"
        err = r.get("max_offset_error_us", "n/a")
        found = r.get("found_cost_us_per_step")
        cost = f"{r['simulated_cost_us_per_step'] / 1e3:.2f}/{'n/a' if found is None else f'{found / 1e3:.2f}'}"
        print(f"{r['ranks']:>6} {r['events']:>11,} {r['json_mb']:>8.0f} {r['seconds']:>8.1f} "
              f"{r['s_per_million_events']:>10.2f} {r['cpu_seconds']:>7.1f} "
              f"{r['cpu_seconds'] / (r['events'] / 1e6):>10.2f} {r['peak_mb']:>8.0f} {named:>18} {err!s:>13} "
              f"{cost:>24}")
    sized = [r for r in rows if "skipped" not in r and r["exit_code"] == 0]
    if len(sized) >= 2:
        a, b = sized[0], sized[-1]
        growth = (b["seconds"] / a["seconds"]) / (b["events"] / a["events"])
        cpu_growth = (b["cpu_seconds"] / a["cpu_seconds"]) / (b["events"] / a["events"])
        print(f"\nfrom {a['ranks']} to {b['ranks']} ranks, wall time grows {growth:.2f}x and CPU time "
              f"{cpu_growth:.2f}x as fast as events (1.0 = linear); memory "
              f"{b['peak_mb'] / a['peak_mb']:.2f}x for {b['events'] / a['events']:.1f}x the events")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n",
                       encoding="utf-8")
    print(f"results: {RESULTS}")
    return 0 if all(r.get("exit_code", 0) == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
