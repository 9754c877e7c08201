"""Record the compute-excess corpus: real 4-rank torchrun jobs, one rank with a 10-20% compute excess, and clean twins.

Promise: ``python scripts/record_excess_runs.py [--only NAME,...] [--out DIR] [--replace] [--list]`` runs the
planned jobs (``PLAN``: 20 runs whose rank R adds about a fraction F of its step's compute to its forward,
``scripts/sample_job.py --slow-rank R --extra-compute F``, and 20 clean runs, interleaved so that the
machine's background load falls on both alike), one at a time, each a real CPU/gloo DDP job profiled for
6 steps (Kineto), and keeps each as ``DIR/<name>/`` (default ``tests/fixtures/accuracy_excess``):
``manifest.json``, ``traces/`` (gzip'd; trimmed as ``record_accuracy_runs.trim_trace`` trims, but keeping
``Input Dims``: the per-op compute test keys ops by their shapes), ``steps/`` and ``env/``. ``DIR/runs.json``
lists every run in the format ``scripts/measure_accuracy.py`` reads (scenario ``excess`` or ``clean``,
the slowed rank, ``slowed_how`` with the fraction, ``expect_named``), with the command, the date, the load
average before and after the job, and what the traces show (``measured``: each rank's wall-clock own work
and its op-cost compute per step over the median of the others', see ``measure_excess``).

The jobs run on whatever machine records them, shared with other work (this repository's is a 2-core box
shared by several sessions): that load is part of the noise the corpus measures, and runs.json records it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record_accuracy_runs import DROPPED_ARGS, Model, observed, trim_trace
from sample_job_runner import REPO, run_job

CORPUS = REPO / "tests" / "fixtures" / "accuracy_excess"
NPROC = 4
PROFILED = 6
STEPS = 14  # 6 lead-in steps, the profiler's wait and warmup steps, 6 profiled steps
MODEL = Model(width=256, depth=1, batch=2048)
KEPT_ARGS = frozenset({"Input Dims"})
TIMEOUT_S = 240.0


@dataclass(frozen=True)
class ExcessSpec:
    name: str
    slowed_rank: int | None = None
    extra_compute: float = 0.0


def _plan() -> tuple[ExcessSpec, ...]:
    fractions = [0.15] * 10 + [0.10, 0.12, 0.14, 0.16, 0.18, 0.20, 0.11, 0.13, 0.17, 0.19]
    runs: list[ExcessSpec] = []
    for i, frac in enumerate(fractions):
        rank = i % NPROC
        runs.append(ExcessSpec(f"excess{round(100 * frac)}-rank{rank}-{i:02d}", rank, frac))
        runs.append(ExcessSpec(f"clean6-{i:02d}"))
    return tuple(runs)


PLAN = _plan()


def record(spec: ExcessSpec, corpus: Path) -> dict[str, Any]:
    run_dir = corpus / spec.name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    load_before = [round(x, 2) for x in os.getloadavg()]
    t0, cpu0 = time.monotonic(), os.times()
    scenario = "clean" if spec.slowed_rank is None else "excess"
    run_job(run_dir, nproc=NPROC, steps=STEPS, profile_steps=PROFILED,
            slow_rank=-1 if spec.slowed_rank is None else spec.slowed_rank, extra_compute=spec.extra_compute,
            width=MODEL.width, depth=MODEL.depth, batch=MODEL.batch, timeout=TIMEOUT_S,
            job_name=f"accuracy-excess-{spec.name}", shown_run_dir=os.path.relpath(run_dir, REPO),
            manifest_extra={"accuracy": {"scenario": scenario, "layout": "unpinned",
                                         "slowed_rank": spec.slowed_rank}})
    wall, cpu1 = time.monotonic() - t0, os.times()
    sizes = [trim_trace(p, DROPPED_ARGS - KEPT_ARGS) for p in sorted((run_dir / "traces").glob("*.json.gz"))]
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    how = None if spec.slowed_rank is None else {
        "kind": "extra-compute-fraction", "fraction": spec.extra_compute,
        "detail": f"rank {spec.slowed_rank}'s forward adds no-grad passes over round(2.4 x {spec.extra_compute:g} x "
                  f"batch) rows: about {spec.extra_compute:.0%} of its step's compute (scripts/sample_job.py)"}
    return {
        "name": spec.name, "scenario": scenario, "layout": "unpinned", "ranks": NPROC, "steps": STEPS,
        "profiled_steps": PROFILED, "slowed_rank": spec.slowed_rank, "slowed_how": how,
        "expect_named": None if spec.slowed_rank is None else True, "expect_named_why": None,
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": {"width": MODEL.width, "depth": MODEL.depth, "batch": MODEL.batch},
        "regenerate": f"python scripts/record_excess_runs.py --only {spec.name} --replace",
        "command": manifest["command"],
        "job_wall_s": round(wall, 1),
        "job_cpu_s": round((cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system), 1),
        "trace_bytes": sum(after for _, after in sizes),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "observed": observed(run_dir, PROFILED),
    }


def save_index(corpus: Path, index: dict[str, Any]) -> None:
    order = {spec.name: i for i, spec in enumerate(PLAN)}
    index["runs"].sort(key=lambda r: (order.get(r["name"], len(order)), r["name"]))
    index["about"] = {
        "what": "real 4-rank torchrun DDP jobs (gloo, CPU), 6 profiled steps: one rank with a 10-20% compute "
                "excess (scenario 'excess') or none ('clean'); recorded by scripts/record_excess_runs.py",
        "machine": f"{os.cpu_count()} cores shared with other work while recording (load_before/after per run)",
        "loads": "load_before / load_after: os.getloadavg() (1, 5, 15 min) before and after the job",
    }
    tmp = corpus / ".runs.json.tmp"
    tmp.write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, corpus / "runs.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated run names from the plan (see --list)")
    parser.add_argument("--out", type=Path, default=CORPUS, help="corpus folder (default: %(default)s)")
    parser.add_argument("--replace", action="store_true", help="re-record runs that are already recorded")
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    args = parser.parse_args(argv)
    names = [n for n in (args.only or "").split(",") if n]
    chosen = [s for s in PLAN if not names or s.name in names]
    if set(names) - {s.name for s in chosen}:
        raise SystemExit(f"unknown run names {sorted(set(names) - {s.name for s in chosen})}; see --list")
    if args.list:
        for spec in chosen:
            print(f"{spec.name:24} slowed {spec.slowed_rank} extra {spec.extra_compute:g}")
        return 0
    corpus: Path = args.out.resolve()
    corpus.mkdir(parents=True, exist_ok=True)
    path = corpus / "runs.json"
    index: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": []}
    for i, spec in enumerate(chosen, 1):
        if not args.replace and any(r["name"] == spec.name for r in index["runs"]) and (corpus / spec.name).is_dir():
            print(f"[{i}/{len(chosen)}] {spec.name}: already recorded")
            continue
        entry = record(spec, corpus)
        index["runs"] = [r for r in index["runs"] if r["name"] != spec.name] + [entry]
        save_index(corpus, index)
        print(f"[{i}/{len(chosen)}] {spec.name}: {entry['job_wall_s']} s wall, {entry['job_cpu_s']} CPU s, "
              f"load {entry['load_before'][0]}, forward vs others {entry['observed']['forward_vs_others']}", flush=True)
    print(f"median job wall {statistics.median(r['job_wall_s'] for r in index['runs']):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
