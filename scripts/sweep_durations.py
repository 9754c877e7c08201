"""How often a rank with a 10-20% compute excess is named from 6 profiled steps, and how often a clean run warns.

Promise: ``python scripts/sweep_durations.py [--runs 20] [--big 2000] [--traces 20]`` prints two sweeps:

1. **Statistics** (fast, many runs): per (step, rank) work W (1 + b_r + e_rt) (+ the excess on one rank), b_r a
   per-rank bias that persists over the run (its spread between ranks, `--bias`), e_rt the per-step jitter,
   an AR(1) series of standard deviation `--jitter` and lag-1 autocorrelation `--rho`; the values measured on
   this machine's clean corpus runs are in benchmarks/README.md. Each run is judged like the straggler
   analyzer does: the last-arrival binomial test (`significance.judge_outliers` on each step's lateness, the
   work minus the earliest rank's) or, when that is not significant, the durations test
   (`significance.judge_durations`). Rates over `--runs` runs (the issue's 20) and over `--big` runs.
2. **Traces** (end to end, `--traces` runs per case): synthetic 4-rank GPU traces of 6 steps
   (`benchmarks/synth.py`, per-kernel noise plus `step_jitter`, a per-(rank, step) factor on all the rank's kernels)
   analyzed by every analyzer; named = a warning/critical straggler finding naming the slowed rank (a
   clean run: any warning/critical straggler finding).

Synthetic inputs only: they give exact truth and many runs. The real recorded torchrun runs are measured by
scripts/measure_accuracy.py on tests/fixtures/accuracy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # synth.py

from perftracker.analyzers.stragglers.significance import (
    judge_durations,  # noqa: E402
    judge_outliers,  # noqa: E402
)


def simulate(rng: np.random.Generator, ranks: int, steps: int, excess: float, jitter: float, rho: float,
             bias: float, slow: int = 2) -> pd.DataFrame:
    """One run's (trial, rank, value) work table, in units of the mean work."""
    e = np.zeros((steps, ranks))
    e[0] = rng.normal(0, jitter, ranks)
    for t in range(1, steps):
        e[t] = rho * e[t - 1] + rng.normal(0, jitter * np.sqrt(1 - rho * rho), ranks)
    work = 1.0 + rng.normal(0, bias, ranks)[None, :] + e
    if excess > 0:
        work[:, slow] += excess
    trial, rank = np.meshgrid(np.arange(steps), np.arange(ranks), indexing="ij")
    return pd.DataFrame({"trial": trial.ravel(), "rank": rank.ravel(), "value": work.ravel()})


def named(table: pd.DataFrame) -> tuple[int, ...]:
    """The rank(s) the analyzer's two tests would name (the binomial first, as the analyzer does)."""
    late = table.assign(value=table["value"] - table.groupby("trial")["value"].transform("min"))
    verdict = judge_outliers(late)
    if verdict.significant:
        return verdict.ranks
    d = judge_durations(table)
    return (d.rank,) if d.significant and d.rank is not None else ()


def statistics_sweep(args: argparse.Namespace) -> None:
    print(f"statistics: 4 ranks, 6 steps, bias {args.bias:.0%}, AR(1) rho {args.rho}")
    print("jitter  excess  named(first 20)  named(big)  clean warns(first 20)  clean warns(big)")
    for jitter in args.jitters:
        rng = np.random.default_rng(7)
        clean = [named(simulate(rng, 4, 6, 0.0, jitter, args.rho, args.bias)) for _ in range(args.big)]
        warn_small = sum(bool(c) for c in clean[: args.runs])
        warn_big = sum(bool(c) for c in clean)
        for excess in (0.10, 0.15, 0.20):
            hits = [named(simulate(rng, 4, 6, excess, jitter, args.rho, args.bias)) == (2,) for _ in range(args.big)]
            print(f"{jitter:6.0%}  {excess:6.0%}  {sum(hits[: args.runs]):3d} / {args.runs:<9d} {np.mean(hits):8.1%}"
                  f"    {warn_small:3d} / {args.runs:<14d} {warn_big / args.big:8.2%}")


def traces_sweep(args: argparse.Namespace) -> None:
    from synth import SynthSpec, generate

    from perftracker.analyzers.analysis import Analysis
    from perftracker.analyzers.findings import Severity
    from perftracker.analyzers.passes import costed_findings
    from perftracker.collectors.loading import LoadOptions, load_path

    print(f"traces: synthetic 4-rank GPU traces, 6 steps, step_jitter {args.trace_jitter:.0%}")
    for excess in (0.0, 0.10, 0.15, 0.20):
        hits, started = 0, time.time()
        for seed in range(args.traces):
            with tempfile.TemporaryDirectory() as tmp:
                extra = {2: 20_000.0 * excess} if excess else {}  # 20 ms of compute per collective slot
                generate(SynthSpec(ranks=4, steps=6, seed=seed, stragglers=extra, step_jitter=args.trace_jitter),
                         Path(tmp) / "t")
                findings = costed_findings(Analysis(load_path(Path(tmp) / "t", LoadOptions(workers=1))))
                loud = [f.ranks for f in findings if f.analyzer == "straggler" and f.severity >= Severity.WARNING]
                hits += (loud == [(2,)]) if excess else bool(loud)
        what = "clean runs with a warning" if not excess else f"{excess:.0%} excess named"
        print(f"  {what}: {hits} / {args.traces}  ({time.time() - started:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--big", type=int, default=2000)
    parser.add_argument("--traces", type=int, default=20)
    parser.add_argument("--jitters", type=float, nargs="+", default=[0.02, 0.03, 0.05])
    parser.add_argument("--trace-jitter", type=float, default=0.03)
    parser.add_argument("--rho", type=float, default=0.2)
    parser.add_argument("--bias", type=float, default=0.01)
    args = parser.parse_args()
    statistics_sweep(args)
    if args.traces:
        traces_sweep(args)


if __name__ == "__main__":
    main()
