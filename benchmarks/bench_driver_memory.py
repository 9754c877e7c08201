#!/usr/bin/env python3
"""Where the driver's memory goes: analyze's phases at N synthetic ranks, measured in one fresh process each.

For each size it generates ~`--target-mb` MB of trace JSON per rank (`perftracker.synth`, gzip'd), then a
child process loads and analyzes them phase by phase (map with the local pool, cache off; reduce;
analyzers; report views), printing after each phase the driver's RSS now, its peak so far and its CPU seconds so far (the pool's
workers are other processes and are not counted here: this is the driver alone), and the deep sizes of
the Store's events and steps tables and of the largest memoized views. No report is written.

    .venv/bin/python benchmarks/bench_driver_memory.py --sizes 128 512

Not run by CI. MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MB = 1e6


def _rss() -> tuple[float, float, float]:
    """(RSS now, peak RSS so far, CPU seconds so far) of this process alone."""
    import psutil

    now = psutil.Process().memory_info().rss / MB
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss * 1024 / MB  # Linux: KiB
    return round(now, 1), round(peak, 1), round(usage.ru_utime + usage.ru_stime, 2)


def _deep_mb(value: Any) -> float:
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        return float(value.memory_usage(deep=True).sum()) / MB
    if isinstance(value, (list, tuple)):
        return sum(_deep_mb(v) for v in value)
    if isinstance(value, dict):
        return sum(_deep_mb(v) for v in value.values())
    if hasattr(value, "__dict__"):
        return sum(_deep_mb(v) for v in vars(value).values())
    return 0.0


def child(traces: Path) -> None:
    phases: list[dict[str, Any]] = [{"phase": "imports"}]
    from perftracker.analyzers.analysis import Analysis
    from perftracker.collectors import loading
    from perftracker.collectors.loading import LoadOptions
    from perftracker.pipeline import analyze

    phases[0].update(zip(("rss_now_mb", "rss_peak_mb", "driver_cpu_s"), _rss()))
    options = LoadOptions(cache_dir=None)
    scan = loading._scan(traces, options)
    held = sum(_deep_mb([r.events, r.steps]) for r in scan.results)
    phases.append({"phase": "map (results held)", **dict(zip(("rss_now_mb", "rss_peak_mb", "driver_cpu_s"), _rss())),
                   "results_tables_mb": round(held, 1)})
    store = loading._build(scan, None)
    del scan
    phases.append({"phase": "reduce (Store built)", **dict(zip(("rss_now_mb", "rss_peak_mb", "driver_cpu_s"), _rss())),
                   "events_mb": round(_deep_mb(store.events), 1), "events_rows": len(store.events),
                   "steps_mb": round(_deep_mb(store.steps), 1)})
    analysis = Analysis(store)
    analyze(analysis)
    distinct: dict[int, tuple[str, Any]] = {}  # a view may return another's table (cost_work_view): count it once
    for fn, value in analysis._views.items():
        distinct.setdefault(id(value), (getattr(fn, "__qualname__", str(fn)), value))
    views = sorted(((name, round(_deep_mb(value), 1)) for name, value in distinct.values()), key=lambda kv: -kv[1])
    phases.append({"phase": "analyzers + views", **dict(zip(("rss_now_mb", "rss_peak_mb", "driver_cpu_s"), _rss())),
                   "views_mb": round(sum(mb for _, mb in views), 1), "largest_views": views[:8]})
    print(json.dumps(phases))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--target-mb", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    from perftracker.synth import SynthSpec, generate

    for ranks in args.sizes:
        root = Path(tempfile.mkdtemp(prefix="perftracker-driver-memory-"))
        try:
            generate(SynthSpec(ranks=ranks, steps=args.steps, stragglers={ranks // 3 + 1: 2000.0},
                               target_mb_per_rank=args.target_mb), root / "traces", truth_path=root / "truth.json")
            done = subprocess.run([sys.executable, __file__, "--child", str(root / "traces")], capture_output=True,
                                  text=True, check=True)
            print(f"{ranks} ranks:")
            for phase in json.loads(done.stdout.strip().splitlines()[-1]):
                print("  " + json.dumps(phase))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
