"""Measure the what-if replay's error against the measured step times, on the samples and the corpora.

Promise: ``python scripts/measure_replay_error.py [FOLDER ...] [--json FILE]`` loads every trace set
(default: each folder of ``sample_traces/``, every run of ``tests/fixtures/accuracy/`` and every multi-rank
folder of ``/work/shared/traces/hta`` when present), replays its cross-rank step graph unchanged
(`perftracker.analyzers.stepgraph.replay`) and prints, per set, the number of replayed steps, the median
and p90 relative error of the replayed step time against the measured one, and OSDI'25's slowdown S and
waste 1 - 1/S; then the median over the sets and over all steps. A set with no matched collective inside a
profiler step has nothing to replay and is listed as such, never counted as exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perftracker.analyzers.analysis import Analysis  # noqa: E402
from perftracker.analyzers.stepgraph.replay_costs import replay_view  # noqa: E402
from perftracker.collectors.loading import LoadOptions, load_path  # noqa: E402

HTA = Path("/work/shared/traces/hta")


def default_sets() -> list[Path]:
    """The samples, the accuracy corpus's runs, the shared HTA corpus's folders of several traces."""
    sets = sorted(p for p in (REPO / "sample_traces").iterdir() if p.is_dir())
    corpus = REPO / "tests" / "fixtures" / "accuracy"
    sets += sorted(p for p in corpus.iterdir() if p.is_dir()) if corpus.is_dir() else []
    if HTA.is_dir():
        folders = {p.parent for p in HTA.rglob("*.json*") if "expected_hta" not in p.parts}
        sets += sorted(f for f in folders if len(list(f.glob("*.json*"))) > 1 and f.name != "output")
    return sets


def measure(path: Path) -> dict[str, Any]:
    """One set's replay figures (see the module docstring)."""
    analysis = Analysis(load_path(path, LoadOptions(workers=1)))
    fit = analysis.view(replay_view)
    per = fit.replay.step_times()
    errors = per["error"].dropna().to_numpy(float) if len(per) else np.array([])
    return {"set": str(path.relative_to(REPO) if path.is_relative_to(REPO) else path), "steps": int(len(errors)),
            "median_error": float(np.median(errors)) if len(errors) else None,
            "p90_error": float(np.quantile(errors, 0.9)) if len(errors) else None,
            "slowdown": round(fit.slowdown, 4), "waste": round(fit.waste, 4), "errors": [float(e) for e in errors]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = [measure(p.resolve()) for p in (args.sets or default_sets()) if p.is_dir()]
    for r in rows:
        med = "nothing to replay" if r["median_error"] is None else (
            f"median {100 * r['median_error']:.2f}%  p90 {100 * r['p90_error']:.2f}%  S {r['slowdown']:.3f}")
        print(f"{r['set']:<60} steps {r['steps']:>4}  {med}")
    done = [r for r in rows if r["median_error"] is not None]
    every = [e for r in done for e in r["errors"]]
    if done:
        print(f"sets replayed {len(done)} of {len(rows)}: median of the sets' median errors "
              f"{100 * float(np.median([r['median_error'] for r in done])):.2f}%, over all {len(every)} steps "
              f"median {100 * float(np.median(every)):.2f}%, p90 {100 * float(np.quantile(every, 0.9)):.2f}%, "
              f"max {100 * max(every):.2f}%")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
