"""The durations-based straggler test: a consistent 10-20% excess of one rank's own work over 6 steps is named.

Synthetic traces (benchmarks/synth.py: per-kernel noise plus a per-(rank, step) jitter on all of a rank's kernels)
give the exact truth; the real recorded torchrun runs of tests/fixtures/accuracy show the test on real jitter.
The sweep behind the rates in benchmarks/README.md is scripts/sweep_durations.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synth import SynthSpec, generate

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.stragglers.significance import judge_durations, judge_outliers, t_sf
from perftracker.analyzers.stragglers.straggler import durations_view
from perftracker.collectors.loading import LoadOptions, load_path

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "accuracy"


def test_student_t_tail_matches_the_tables() -> None:
    # GIVEN the one-sided 5% and 1% points of Student's t with 5 degrees of freedom, and a large-df 2.5% point
    # THEN the tail function gives those probabilities
    assert t_sf(2.015, 5) == pytest.approx(0.05, abs=1e-4)
    assert t_sf(3.365, 5) == pytest.approx(0.01, abs=1e-4)
    assert t_sf(1.96, 1e6) == pytest.approx(0.025, abs=1e-4)
    assert t_sf(-1.0, 3) + t_sf(1.0, 3) == pytest.approx(1.0)


def _table(work: np.ndarray) -> pd.DataFrame:
    steps, ranks = work.shape
    trial, rank = np.meshgrid(np.arange(steps), np.arange(ranks), indexing="ij")
    return pd.DataFrame({"trial": trial.ravel(), "rank": rank.ravel(), "value": work.ravel()})


def test_durations_name_a_rank_the_last_arrival_count_misses() -> None:
    # GIVEN 6 steps of 4 ranks whose work jitters by ~3%; rank 2 works 12% longer every step, but in 3 steps
    # another rank's jitter makes that one last (so "last in k of 6 steps" is 3: chance says 1.5)
    rng = np.random.default_rng(3)
    work = 1.0 + rng.normal(0, 0.03, size=(6, 4))
    work[:, 2] += 0.12
    for step, other in ((0, 0), (2, 1), (4, 3)):
        work[step, other] = work[step, 2] + 0.01
    table = _table(work)
    late = table.assign(value=table["value"] - table.groupby("trial")["value"].transform("min"))
    # WHEN both tests judge it
    binomial, durations = judge_outliers(late), judge_durations(table)
    # THEN the last-arrival test cannot tell; the durations test names rank 2 (longer than the others' median
    # in all 6 steps)
    assert not binomial.significant
    assert durations.significant and durations.rank == 2 and durations.positive_steps == 6
    assert durations.relative_excess == pytest.approx(0.12, abs=0.03)


def test_durations_stay_quiet_on_a_drifting_clean_run() -> None:
    # GIVEN 6 steps of 4 ranks, none slowed, each drifting slowly (AR(1), rho 0.8) by a few percent
    rng = np.random.default_rng(11)
    quiet = 0
    for _ in range(200):
        e = np.zeros((6, 4))
        e[0] = rng.normal(0, 0.03, 4)
        for t in range(1, 6):
            e[t] = 0.8 * e[t - 1] + rng.normal(0, 0.03 * 0.6, 4)
        quiet += not judge_durations(_table(1.0 + e)).significant
    # THEN at most 2% of such runs name a rank (the family-wise level is 0.5%, the drift is the hard case)
    assert quiet >= 196


def _loud_stragglers(path: Path) -> list[tuple[int, ...]]:
    findings = costed_findings(Analysis(load_path(path, LoadOptions(workers=1))))
    return [f.ranks for f in findings if f.analyzer == "straggler" and f.severity >= Severity.WARNING]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_15_percent_compute_excess_is_named_from_6_synthetic_steps(tmp_path: Path, seed: int) -> None:
    # GIVEN synthetic GPU traces of 4 ranks and 6 steps, 3% per-step jitter, rank 2 computing 15% more
    generate(SynthSpec(ranks=4, steps=6, seed=seed, stragglers={2: 3000.0}, step_jitter=0.03), tmp_path / "t")
    # WHEN analyzed
    loud = _loud_stragglers(tmp_path / "t")
    # THEN rank 2, and only rank 2, is named
    assert loud == [(2,)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_synthetic_runs_of_6_steps_name_nobody(tmp_path: Path, seed: int) -> None:
    generate(SynthSpec(ranks=4, steps=6, seed=seed, step_jitter=0.03), tmp_path / "t")
    assert _loud_stragglers(tmp_path / "t") == []


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the accuracy corpus is part of the repository")
def test_real_runs_extra_compute_named_by_durations_clean_6_step_runs_not() -> None:
    # GIVEN real 4-rank torchrun gloo runs recorded on this 2-core machine: rank 0 does 3x the forward
    # (16 profiled steps), and the four clean runs of 6 profiled steps
    def verdict(name: str):  # type: ignore[no-untyped-def]
        return Analysis(load_path(CORPUS / name, LoadOptions(workers=1))).view(durations_view)

    # THEN the durations test names rank 0 in the first, nobody in the clean ones
    slowed = verdict("inproc-rank0-x3-16")
    assert slowed.significant and slowed.rank == 0
    for name in ("clean-repro-a", "clean-repro-b", "clean-repro-c", "clean-repro-d"):
        assert not verdict(name).significant, name
