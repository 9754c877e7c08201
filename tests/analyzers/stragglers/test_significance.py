"""The straggler significance test: about 1% false stragglers on clean noise, real ones still named."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perftracker.analyzers.stragglers.significance import ALPHA, binomial_tail, judge_outliers


def _trials(values: np.ndarray) -> pd.DataFrame:
    t, n = values.shape
    return pd.DataFrame({"trial": np.repeat(np.arange(t), n), "rank": np.tile(np.arange(n), t),
                         "value": values.ravel()})


def test_binomial_tail_is_exact() -> None:
    assert binomial_tail(0, 5, 0.3) == 1.0
    assert binomial_tail(6, 5, 0.3) == 0.0
    assert binomial_tail(5, 5, 0.5) == pytest.approx(1 / 32)
    assert binomial_tail(2, 3, 0.5) == pytest.approx(0.5)
    assert binomial_tail(3, 10, 0.2) == pytest.approx(1 - sum(math.comb(10, i) * 0.2**i * 0.8 ** (10 - i)
                                                               for i in range(3)))


def test_binomial_tail_of_a_long_run_does_not_overflow() -> None:
    # GIVEN 2 ranks judged over 3,000 steps (the float of math.comb(3000, 1500) overflows)
    # THEN the tail is a probability: one half of the mass at and above the mean, a tiny one far above it
    assert binomial_tail(1500, 3000, 0.5) == pytest.approx(0.5 + 0.5 * (math.comb(3000, 1500) / 2**3000), rel=1e-9)
    assert 0.0 < binomial_tail(1800, 3000, 0.5) < 1e-20
    assert binomial_tail(0, 3000, 0.5) == 1.0 and binomial_tail(3000, 3000, 1.0) == 1.0


@pytest.mark.parametrize(("ranks", "trials"), [(2, 8), (4, 6), (4, 32), (8, 16), (64, 24)])
def test_clean_noise_rarely_gives_a_straggler(ranks: int, trials: int) -> None:
    # GIVEN 400 clean runs: every rank's value per trial is the same noisy distribution
    rng = np.random.default_rng(ranks * 1000 + trials)
    # WHEN each run is judged
    named = sum(judge_outliers(_trials(rng.lognormal(0.0, 0.3, (trials, ranks)))).significant for _ in range(400))
    # THEN at most ~ALPHA of them name anyone (2x ALPHA plus sampling slack over 400 runs)
    assert named <= 400 * 2 * ALPHA + 3


def test_a_persistent_straggler_is_named_with_its_confidence() -> None:
    # GIVEN 4 ranks over 16 steps, rank 2 slower by ~3 noise widths in every step
    rng = np.random.default_rng(7)
    values = rng.normal(10.0, 1.0, (16, 4))
    values[:, 2] += 3.0
    # WHEN judged
    verdict = judge_outliers(_trials(values))
    # THEN rank 2 alone is named, confidently
    assert verdict.significant and verdict.ranks == (2,) and not verdict.is_group
    assert verdict.confidence > 0.99 and verdict.effect > 2 * verdict.spread


def test_six_steps_of_noise_are_an_info_not_a_straggler() -> None:
    # GIVEN the clean repro: 4 ranks, 6 steps, one rank a little slower by chance
    values = np.array([[8.0, 7.9, 8.4, 7.7], [8.1, 8.0, 8.3, 8.2], [7.8, 8.1, 8.6, 7.9],
                       [8.2, 7.7, 8.0, 8.1], [7.9, 8.0, 8.5, 7.8], [8.0, 8.2, 8.1, 7.9]])
    # WHEN judged
    verdict = judge_outliers(_trials(values))
    # THEN nothing is significant, but the suspect and why are given for an info
    assert not verdict.significant and verdict.suspect == 2 and "noise" in verdict.reason


def test_two_ranks_slow_together_are_a_group_not_a_straggler() -> None:
    # GIVEN 8 ranks where ranks 1 and 5 share a core: both ~1.45x slower for the whole run
    rng = np.random.default_rng(3)
    values = rng.normal(10.0, 0.5, (24, 8))
    values[:, [1, 5]] *= 1.45
    # WHEN judged
    verdict = judge_outliers(_trials(values))
    # THEN the pair is named as a group, and no single rank
    assert verdict.significant and verdict.is_group and verdict.ranks == (1, 5)


def test_a_burst_in_one_half_is_not_persistent() -> None:
    # GIVEN rank 0 slow only in the last third of the window
    rng = np.random.default_rng(5)
    values = rng.normal(10.0, 1.0, (30, 4))
    values[20:, 0] += 6.0
    # WHEN judged; THEN it is not called a persistent straggler
    assert not judge_outliers(_trials(values)).significant
