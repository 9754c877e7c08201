#!/usr/bin/env python3
"""Where the driver's memory goes: analyze's phases at N synthetic ranks, measured in one fresh process each.

For each size it generates ~`--target-mb` MB of trace JSON per rank (`benchmarks/synth.py`, gzip'd), then a
child process loads and analyzes them phase by phase (map with the local pool, cache off; reduce;
analyzers; report views), printing after each phase the driver's RSS now, its peak so far and its CPU seconds so far (the pool's
workers are other processes and are not counted here: this is the driver alone), and the deep sizes of
the Store's events (resident, or rows and Parquet size on disk) and steps tables and of the largest
memoized views. No report is written.

With `--per-view` it also says where the peak comes from: around each `analysis.view(fn)` and each
analyzer call it resets the process's RSS high-water mark (Linux `/proc/self/clear_refs`, `5`) and reads
`VmHWM` at the end, so each call's `rise_mb` is how far the RSS rose above its value at the call's start
(inclusive: a view computed inside another counts in both; `nested_in` names the enclosing call), with
its CPU seconds (`cpu_s`, inclusive too). The 10 largest rises and the 10 largest CPU costs are printed.

    .venv/bin/python benchmarks/bench_driver_memory.py --sizes 128 512
    .venv/bin/python benchmarks/bench_driver_memory.py --sizes 128 --per-view

Not run by CI. MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
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


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


class HighWater:
    """The RSS rise of each (nested) call above its start, from the kernel's high-water mark."""

    def __init__(self) -> None:
        self.stack: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []

    def _reset(self) -> None:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")

    def enter(self, name: str) -> None:
        hwm = _status_kb("VmHWM")
        if self.stack:  # the enclosing call's peak so far, before the reset drops it
            self.stack[-1]["peak_kb"] = max(self.stack[-1]["peak_kb"], hwm)
        self._reset()
        now = _status_kb("VmRSS")
        self.stack.append({"name": name, "start_kb": now, "peak_kb": now, "cpu_s": time.process_time()})

    def exit(self) -> None:
        frame = self.stack.pop()
        peak = max(frame["peak_kb"], _status_kb("VmHWM"))
        if self.stack:
            self.stack[-1]["peak_kb"] = max(self.stack[-1]["peak_kb"], peak)
        self.calls.append({"call": frame["name"], "rise_mb": round((peak - frame["start_kb"]) * 1024 / MB, 1),
                           "start_mb": round(frame["start_kb"] * 1024 / MB, 1),
                           "cpu_s": round(time.process_time() - frame["cpu_s"], 2),
                           "nested_in": self.stack[-1]["name"] if self.stack else ""})


def instrument(meter: HighWater) -> None:
    """Wrap `Analysis.view` and every builtin analyzer so that `meter` sees each call."""
    from perftracker.analyzers import registry
    from perftracker.analyzers.analysis import Analysis

    plain_view = Analysis.view

    def view(self: Any, fn: Any) -> Any:
        if fn in self._views or fn in self._failed:
            return plain_view(self, fn)
        meter.enter("view " + getattr(fn, "__qualname__", str(fn)))
        try:
            return plain_view(self, fn)
        finally:
            meter.exit()

    Analysis.view = view  # type: ignore[method-assign]

    def measured(name: str, fn: Any) -> Any:
        def call(analysis: Any) -> Any:
            meter.enter("analyzer " + name)
            try:
                return fn(analysis)
            finally:
                meter.exit()
        return call

    registry.BUILTIN = tuple(dataclasses.replace(a, fn=measured(a.name, a.fn)) for a in registry.BUILTIN)


def child(traces: Path, per_view: bool = False) -> None:
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
    parts = getattr(store, "event_parts", None)  # the events on disk (Parquet) past a size, else resident
    rows = getattr(store, "n_events", None)  # (older code, run for a side-by-side: no events on disk)
    rows = len(store.tables["events"]) if rows is None else rows
    phases.append({"phase": "reduce (Store built)", **dict(zip(("rss_now_mb", "rss_peak_mb", "driver_cpu_s"), _rss())),
                   "events_resident_mb": round(_deep_mb(store.tables["events"]), 1), "events_rows": rows,
                   "events_on_disk_mb": round(parts.path.stat().st_size / MB, 1) if parts and parts.path.exists() else 0.0,
                   "steps_mb": round(_deep_mb(store.steps), 1)})
    meter = HighWater()
    if per_view:
        instrument(meter)
    analysis = Analysis(store)
    analyze(analysis)
    distinct: dict[int, tuple[str, Any]] = {}  # a view may return another's table (cost_work_view): count it once
    for fn, value in analysis._views.items():
        distinct.setdefault(id(value), (getattr(fn, "__qualname__", str(fn)), value))
    views = sorted(((name, round(_deep_mb(value), 1)) for name, value in distinct.values()), key=lambda kv: -kv[1])
    phases.append({"phase": "analyzers + views", **dict(zip(("rss_now_mb", "rss_peak_mb", "driver_cpu_s"), _rss())),
                   "views_mb": round(sum(mb for _, mb in views), 1), "largest_views": views[:8]})
    if per_view:
        phases.append({"phase": "top 10 calls by RSS rise",
                       "calls": sorted(meter.calls, key=lambda c: -c["rise_mb"])[:10]})
        phases.append({"phase": "top 10 calls by CPU", "calls": sorted(meter.calls, key=lambda c: -c["cpu_s"])[:10]})
    getattr(store, "close", lambda: None)()
    print(json.dumps(phases))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--target-mb", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--per-view", action="store_true",
                        help="also measure the RSS rise of each view and analyzer call (top 10)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.per_view)
        return 0
    from synth import SynthSpec, generate

    for ranks in args.sizes:
        root = Path(tempfile.mkdtemp(prefix="perftracker-driver-memory-"))
        try:
            generate(SynthSpec(ranks=ranks, steps=args.steps, stragglers={ranks // 3 + 1: 2000.0},
                               target_mb_per_rank=args.target_mb), root / "traces", truth_path=root / "truth.json")
            done = subprocess.run([sys.executable, __file__, "--child", str(root / "traces"),
                                   *(["--per-view"] if args.per_view else [])], capture_output=True,
                                  text=True, check=True)
            print(f"{ranks} ranks:")
            for phase in json.loads(done.stdout.strip().splitlines()[-1]):
                print("  " + json.dumps(phase))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
