#!/usr/bin/env python3
"""Memory and CPU of parsing one big Kineto trace: 1M and 5M events, each parse in a fresh process.

The trace is synthetic: `benchmarks/synth.py`'s rank-0 document for 2 ranks and 10 steps (~20k events: a
`cpu_op`, a `cudaLaunchKernel`, two `ac2g` flow events and a kernel per compute kernel, plus the collectives),
whose steps are written again and again, each copy shifted in time past the previous one (ProfilerStep
numbers, correlation and External ids shifted too), until the file holds `--events` trace events. It is
written streaming (never the whole document in memory), as `.json` or, with `--gzip`, `.json.gz`.

Each measurement is a child process that imports perftracker, then runs what an engine's worker runs for
one file without the cache (`trace_map._parse`: read, decode, events and steps tables), and reports its
peak RSS (`ru_maxrss`) before and after the parse, its CPU seconds (user + system) and wall seconds of the
parse, and the events table's rows and bytes. `--code DIR` runs the child against another checkout
(for instance the main branch, to measure "before"). The load average is printed with every run.

    .venv/bin/python benchmarks/bench_trace_memory.py --events 1000000 5000000
    .venv/bin/python benchmarks/bench_trace_memory.py --events 1000000 --code ../main   # before
    .venv/bin/python benchmarks/bench_trace_memory.py --events 1000000 --gzip

Not run by CI. MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MB = 1e6

_CHILD = r"""
import json, resource, sys, time, gc
from pathlib import Path
from perftracker.collectors.traces import trace_map
from perftracker.collectors.traces.comm_kernels import load_comm_kernels

kernels = load_comm_kernels()
before = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
facts, notes, events, steps = trace_map._parse(Path(sys.argv[1]), kernels)
wall = time.perf_counter() - t0
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "peak_before_mb": before.ru_maxrss * 1024 / 1e6, "peak_mb": after.ru_maxrss * 1024 / 1e6,
    "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), "wall_s": wall,
    "rows": len(events), "steps": len(steps), "table_mb": float(events.memory_usage(deep=True).sum()) / 1e6,
    "notes": [m for m, _ in notes]}))
"""


def _events(total: int) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """(the document without its events, the events): synth's rank-0 steps repeated to `total` events."""
    from synth import SynthSpec
    from synth_model import _make_plan, _rank_document

    doc = _rank_document(_make_plan(SynthSpec(ranks=2, steps=10, kernels_per_step=400, seed=1)), 0)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    head = [e for e in events if e["ph"] == "M"]
    tail = [e for e in events if e.get("cat") == "Trace" or e["ph"] == "i"]
    body = [e for e in events if e not in head and e not in tail]
    first = min(e["ts"] for e in body)
    span = max(e["ts"] + e.get("dur", 0) for e in body) - first + 1000.0
    corr = max(e.get("args", {}).get("correlation", 0) for e in body) + 1
    ext = max(e.get("args", {}).get("External id", 0) for e in body) + 1
    copies = max(1, (total - len(head) - len(tail)) // len(body))

    def stream() -> Iterator[dict[str, Any]]:
        yield from head
        left = total - len(head) - len(tail)
        for copy in range(copies + 1):
            for e in body:
                if left <= 0:
                    break
                left -= 1
                if copy == 0:
                    yield e
                    continue
                out = dict(e, ts=e["ts"] + copy * span)
                if str(out["name"]).startswith("ProfilerStep#"):
                    out["name"] = f"ProfilerStep#{int(out['name'][13:]) + 10 * copy}"
                if "id" in out:
                    out["id"] = out["id"] + copy * corr
                if "args" in out:
                    args = dict(out["args"])
                    if "correlation" in args:
                        args["correlation"] += copy * corr
                    if "External id" in args:
                        args["External id"] += copy * ext
                    out["args"] = args
                yield out
        yield from tail

    return doc, stream()


def write_trace(path: Path, total: int) -> None:
    """Write a synthetic trace of `total` events to `path` (gzip when it ends in .gz), streaming."""
    doc, events = _events(total)
    front = {k: v for k, v in doc.items() if k in ("schemaVersion", "deviceProperties", "distributedInfo",
                                                   "record_shapes")}
    back = {k: v for k, v in doc.items() if k not in front}
    out: BinaryIO
    with (gzip.open(path, "wb", compresslevel=1) if path.suffix == ".gz" else open(path, "wb")) as out:
        out.write(orjson.dumps(front)[:-1] + b',"traceEvents":[')
        batch: list[bytes] = []
        first = True
        for e in events:
            batch.append(orjson.dumps(e))
            if len(batch) >= 10000:
                out.write((b"" if first else b",") + b",".join(batch))
                first, batch = False, []
        if batch:
            out.write((b"" if first else b",") + b",".join(batch))
        out.write(b"]," + orjson.dumps(back)[1:])


def measure(path: Path, code: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                          cwd=code, check=False)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_avg"] = os.getloadavg()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--gzip", action="store_true", help="write .json.gz instead of .json")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to import perftracker from")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="keep (and reuse) the traces in this folder")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="perftracker-bench-mem-"))
    folder.mkdir(parents=True, exist_ok=True)
    for total in args.events:
        path = folder / f"rank-0-{total}.pt.trace.json{'.gz' if args.gzip else ''}"
        if not path.exists():
            write_trace(path, total)
        size = path.stat().st_size
        for run in range(args.repeat):
            r = measure(path, args.code.resolve())
            if "error" in r:
                print(f"{total:>9,} events: child failed\n{r['error']}")
                continue
            per_event = (r["peak_mb"] - r["peak_before_mb"]) * MB / total
            print(f"{total:>9,} events ({size / MB:,.0f} MB on disk) run {run}: peak RSS {r['peak_mb']:,.0f} MB "
                  f"(after imports {r['peak_before_mb']:,.0f} MB; {per_event:,.0f} B/event above it), "
                  f"CPU {r['cpu_s']:.2f} s, wall {r['wall_s']:.2f} s, {r['rows']:,} rows, table "
                  f"{r['table_mb']:,.0f} MB, load {', '.join(f'{x:.2f}' for x in r['load_avg'])}")
    if args.dir is None:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
