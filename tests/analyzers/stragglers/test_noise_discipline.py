"""Step-time and peer rules beyond the straggler test judge their evidence against the run's own noise.

Promise checked: "slower since step N" is a warning only for a sustained rise that a wandering step
time (autocorrelated noise, as on a busy machine) does not produce; unstable step time is a warning
only when a phase of the rank's own work explains the slow steps (not `backward`, which includes
waiting for the gradient all-reduce); a rank that spends longer in `backward` because it is faster
elsewhere is not a phase straggler. (The same discipline for GPUs: tests/health/test_gpu_peers.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.stragglers.degradation import change_point
from perftracker.collectors.loading import LoadOptions, load_path


def _wandering(rng: np.random.Generator, n: int, rho: float, base: float = 0.1, noise: float = 0.12) -> pd.Series:
    """Step times whose relative noise is AR(1) with autocorrelation `rho` (a machine whose load drifts)."""
    e = np.zeros(n)
    for i in range(1, n):
        e[i] = rho * e[i - 1] + rng.normal(0, noise)
    return pd.Series(base * np.exp(e))


def test_wandering_step_time_rarely_looks_like_a_slowdown_and_a_real_one_is_found() -> None:
    # GIVEN 300 runs of 24-40 steps whose step time only wanders (autocorrelated noise, no change)
    rng = np.random.default_rng(7)
    loud = 0
    for i in range(300):
        series = _wandering(rng, 24 + (i % 17), rho=0.5)
        cp = change_point(series)
        loud += bool(cp is not None and cp.verdict.significant)
    # THEN at most ~1% of them (allowing sampling error) get a significant "slower since step N"
    assert loud <= 6, f"{loud} of 300 wandering runs judged a slowdown"
    # AND a rise of 20% at step 100 of 200 steps with the same kind of noise is found at its step
    found = 0
    for _ in range(20):
        series = _wandering(rng, 200, rho=0.5, noise=0.05)
        series.iloc[100:] *= 1.2
        cp = change_point(series)
        found += bool(cp is not None and cp.verdict.significant and abs(cp.step - 100) <= 3)
    assert found >= 18


def _write_steps(run: Path, phases_by_rank: dict[int, list[dict[str, float]]]) -> Path:
    (run / "steps").mkdir(parents=True)
    for rank, steps in phases_by_rank.items():
        t = 1_700_000_000_000_000_000
        with open(run / "steps" / f"rank-{rank}.jsonl", "w") as fh:
            for step, phases in enumerate(steps):
                total = int(sum(phases.values()) * 1e6)
                fh.write(json.dumps({"rank": rank, "step": step, "start_ns": t, "end_ns": t + total, "host": "node-0",
                                     "phases_ns": {k: int(v * 1e6) for k, v in phases.items()}}) + "\n")
                t += total
    return run


def _steps_findings(run: Path) -> list[Finding]:
    return [f for f in costed_findings(Analysis(load_path(run, LoadOptions(workers=1)))) if f.analyzer == "steps"]


def test_slow_steps_in_the_data_phase_are_a_warning_and_in_backward_an_info(tmp_path: Path) -> None:
    # GIVEN 4 ranks, 30 steps of data 5 / forward 30 / backward 60 ms, where every 4th step is 80 ms slower
    rng = np.random.default_rng(3)

    def run(slow_phase: str, name: str) -> Path:
        ranks = {}
        for rank in range(4):
            steps = []
            for step in range(30):
                phases = {"data": 5.0, "forward": 30.0 + rng.normal(0, 1), "backward": 60.0 + rng.normal(0, 1)}
                if step % 4 == 1:
                    phases[slow_phase] += 80.0
                steps.append(phases)
            ranks[rank] = steps
        return _write_steps(tmp_path / name, ranks)

    # WHEN the input stalls are in 'data' on every rank
    data = [f for f in _steps_findings(run("data", "data")) if f.key == "steps:jitter"]
    # THEN unstable step time is a warning naming the data phase
    assert [f.severity for f in data] == [Severity.WARNING] and "'data'" in data[0].title
    # WHEN the same slow steps are in 'backward' (which includes waiting in the gradient all-reduce)
    back = [f for f in _steps_findings(run("backward", "backward")) if f.key == "steps:jitter"]
    # THEN it is an info that says why the step files cannot tell
    assert [f.severity for f in back] == [Severity.INFO] and "waiting for the other ranks" in back[0].title


def test_a_rank_that_waits_longer_in_backward_because_it_is_faster_is_not_a_straggler(tmp_path: Path) -> None:
    # GIVEN rank 0 with its own core: forward 10 ms where the others take 30, so it waits 20 ms longer in
    # the backward phase (the gradient all-reduce) in every one of 24 steps
    rng = np.random.default_rng(5)
    ranks = {rank: [{"data": 5.0, "forward": (10.0 if rank == 0 else 30.0) + rng.normal(0, 0.5),
                     "backward": (80.0 if rank == 0 else 60.0) + rng.normal(0, 0.5)} for _ in range(24)]
             for rank in range(4)}
    found = _steps_findings(_write_steps(tmp_path / "run", ranks))
    # THEN its backward finding is an info saying it waits, and no step rule warns about rank 0
    backward = [f for f in found if f.key == "steps:phase:backward:0"]
    assert [f.severity for f in backward] == [Severity.INFO] and "waiting for them" in backward[0].title
    assert not [f for f in found if f.severity >= Severity.WARNING and 0 in f.ranks]
