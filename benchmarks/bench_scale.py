#!/usr/bin/env python3
"""Scale: `perftracker analyze` on 128 to 4096 synthetic ranks, with the local engine and with Ray.

For each size it generates ~`--target-mb` MB of trace JSON per rank (`benchmarks/synth.py`, gzip'd on disk,
one seeded compute straggler at rank ranks//3 + 1) into a temporary folder, then for each engine runs
`perftracker analyze DIR -o OUT --no-cache --quiet --engine E` in a subprocess (with `--engine ray` and no
address, analyze starts a local Ray for the command: its GCS, raylet and worker processes are children of
the analyze process, so they are in the sampled tree). Every `--interval` s it samples the process tree
(psutil: the process and all descendants): the sum of RSS (peak of the tree), the analyze process's own
RSS (peak of the driver), the largest other process (peak of one worker), and each process's CPU time
(user + system, the last value seen per pid, summed; processes that live shorter than one interval are
missed). It reports wall, CPU, peaks, throughput (MB of JSON per CPU second, and per core second of
wall), and whether the straggler finding names the seeded rank. `--warm` adds, per engine, a run on a
fresh cache folder (cold, writes the per-rank Parquet) and a second one on it (warm: nothing parsed).

    .venv/bin/python benchmarks/bench_scale.py                              # 128 512 ranks x 1 MB, local + ray
    .venv/bin/python benchmarks/bench_scale.py --sizes 1024 --engines local
    .venv/bin/python benchmarks/bench_scale.py --sizes 128 --warm           # + cold/warm cache runs

The sum of RSS counts pages shared between processes once per process (copy-on-write pages of forked
workers, Ray's shared-memory object store in every process that maps it): an upper bound. Not run by CI.
MB = 10^6 bytes. Results are also written as JSON to benchmarks/results/bench_scale.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_straggler_scale import GZ_RATIO_BOUND, OUTPUT_MARGIN, straggler_verdict
from synth import SynthSpec, generate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bench_scale.json"
MB = 1e6


@dataclass
class TreeSample:
    """What the sampler saw of one process tree."""

    peak_tree: int = 0
    peak_driver: int = 0
    peak_other: int = 0
    most_processes: int = 0
    cpu: dict[int, float] = field(default_factory=dict)  # pid -> user + system seconds, last seen
    driver_cpu: float = 0.0

    def take(self, root: psutil.Process) -> None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        total = 0
        for p in procs:
            try:
                with p.oneshot():
                    rss = p.memory_info().rss
                    times = p.cpu_times()
            except psutil.Error:
                continue
            total += rss
            self.cpu[p.pid] = times.user + times.system
            if p.pid == root.pid:
                self.peak_driver = max(self.peak_driver, rss)
                self.driver_cpu = times.user + times.system
            else:
                self.peak_other = max(self.peak_other, rss)
        self.peak_tree = max(self.peak_tree, total)
        self.most_processes = max(self.most_processes, len(procs))


def run_sampled(cmd: list[str], interval: float, log: Path, env: dict[str, str]) -> tuple[int, float, TreeSample]:
    sample = TreeSample()
    with open(log, "wb") as out:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent, env=env)
        root = psutil.Process(child.pid)
        while child.poll() is None:
            sample.take(root)
            time.sleep(interval)
        wall = time.perf_counter() - start
    return child.returncode, wall, sample


def analyze_once(traces: Path, out: Path, engine: str, args: argparse.Namespace, cache: Path | None,
                 seeded: int, truth: dict[str, Any], json_mb: float, ranks: int, label: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "perftracker", "analyze", str(traces), "-o", str(out), "--quiet",
           "--engine", engine]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if cache is None:
        cmd.append("--no-cache")
    else:
        env["XDG_CACHE_HOME"] = str(cache)
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    log = out.parent / f"{out.name}.log"
    rc, wall, sample = run_sampled(cmd, args.interval, log, env)
    cpu = sum(sample.cpu.values())
    verdict = straggler_verdict(out, seeded, truth) if rc == 0 else {"named": "n/a", "why": f"exit {rc}"}
    cores = os.cpu_count() or 1
    row: dict[str, Any] = {
        "ranks": ranks, "engine": engine, "run": label, "exit_code": rc, "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2), "driver_cpu_s": round(sample.driver_cpu, 2),
        "peak_tree_mb": round(sample.peak_tree / MB, 1), "peak_driver_mb": round(sample.peak_driver / MB, 1),
        "peak_worker_mb": round(sample.peak_other / MB, 1), "processes": sample.most_processes,
        "mb_per_cpu_s": round(json_mb / cpu, 2) if cpu else None,
        "mb_per_core_s": round(json_mb / (wall * cores), 2), "load_avg_1m": round(os.getloadavg()[0], 2),
        **verdict,
    }
    if rc != 0:
        row["log_tail"] = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        print(f"    analyze exited {rc}:\n{row['log_tail']}")
    print(f"    {engine:5} {label:8} wall {wall:7.1f} s  CPU {cpu:7.1f} s  tree {sample.peak_tree / MB:6.0f} MB  "
          f"driver {sample.peak_driver / MB:6.0f} MB  straggler {verdict.get('named')}", flush=True)
    return row


def bench_size(ranks: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    seeded = ranks // 3 + 1
    spec = SynthSpec(ranks=ranks, steps=args.steps, seed=args.seed, stragglers={seeded: args.straggler_us},
                     target_mb_per_rank=args.target_mb)
    base = Path(args.tmp) if args.tmp else Path(tempfile.gettempdir())
    need = ranks * args.target_mb * MB * GZ_RATIO_BOUND * (2 if args.warm else 1) + OUTPUT_MARGIN
    free = shutil.disk_usage(base).free
    if free < need:
        print(f"  {ranks} ranks: skipped, needs ~{need / MB:.0f} MB free in {base}, has {free / MB:.0f} MB")
        return [{"ranks": ranks, "skipped": f"disk: need {need / MB:.0f} MB, free {free / MB:.0f} MB"}]
    root = Path(tempfile.mkdtemp(prefix="perftracker-scale-bench-", dir=base))
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        truth = generate(spec, root / "traces", truth_path=root / "ground_truth.json")
        gen_s = time.perf_counter() - t0
        on_disk = sum(f.stat().st_size for f in (root / "traces").iterdir())
        json_mb = truth.bytes_json / MB
        print(f"  {ranks} ranks: {json_mb:.0f} MB JSON ({on_disk / MB:.0f} MB on disk), {truth.events_complete:,} "
              f"events, generated in {gen_s:.0f} s", flush=True)
        truth_doc = json.loads((root / "ground_truth.json").read_text(encoding="utf-8"))
        common = {"json_mb": round(json_mb, 1), "disk_mb": round(on_disk / MB, 1), "events": truth.events_complete,
                  "seeded_rank": seeded}
        for engine in args.engines:
            runs: list[tuple[str, Path | None]] = [("no-cache", None)]
            if args.warm:
                runs += [("cold", root / f"cache-{engine}"), ("warm", root / f"cache-{engine}")]
            for label, cache in runs:
                out = root / f"out-{engine}-{label}"
                rows.append({**common, **analyze_once(root / "traces", out, engine, args, cache, seeded, truth_doc,
                                                      json_mb, ranks, label)})
                shutil.rmtree(out, ignore_errors=True)
        return rows
    finally:
        if args.keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'ranks':>6} {'engine':>6} {'run':>8} {'JSON MB':>8} {'wall s':>7} {'CPU s':>7} {'tree MB':>8} "
          f"{'driver MB':>9} {'worker MB':>9} {'MB/CPU s':>8} {'MB/core s':>9} {'straggler':>10}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['ranks']:>6} skipped: {r['skipped']}")
            continue
        print(f"{r['ranks']:>6} {r['engine']:>6} {r['run']:>8} {r['json_mb']:>8.0f} {r['wall_s']:>7.1f} "
              f"{r['cpu_s']:>7.1f} {r['peak_tree_mb']:>8.0f} {r['peak_driver_mb']:>9.0f} {r['peak_worker_mb']:>9.0f} "
              f"{r['mb_per_cpu_s'] or 0:>8.1f} {r['mb_per_core_s']:>9.2f} {r['named']:>10}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512], help="rank counts (default 128 512)")
    parser.add_argument("--engines", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--target-mb", type=float, default=1.0, help="MB of trace JSON per rank (default 1)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--straggler-us", type=float, default=2000.0,
                        help="extra compute before every collective on the seeded rank (ranks//3 + 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="analyze --workers (0: its default)")
    parser.add_argument("--interval", type=float, default=0.1, help="sampling interval, seconds")
    parser.add_argument("--warm", action="store_true", help="also run on a fresh cache folder, cold then warm")
    parser.add_argument("--tmp", default="", help="where to create the temporary folder (default: $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (prints where)")
    args = parser.parse_args()

    print(f"perftracker scale benchmark: sizes {args.sizes}, engines {args.engines}, ~{args.target_mb} MB JSON per "
          f"rank, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    rows = [row for n in args.sizes for row in bench_size(n, args)]
    print_table(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                                   "rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(f"results: {RESULTS}")
    return 0 if all(r.get("exit_code", 0) == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
