"""The one change-point detector (`degradation.change_point_of`, offline and online alike) gives what the textbook
numpy formulas give, and the watcher's `Rechecks` spare confirmations without losing a slowdown."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perftracker.analyzers.online import step_rules
from perftracker.analyzers.online.step_rules import (
    CONFIRM_WINDOWS,
    DEFAULT_WINDOW,
    Rechecks,
    recheck_steps,
    series_alarm,
)
from perftracker.analyzers.stragglers.degradation import ChangePoint, best_split, change_point_of
from perftracker.analyzers.stragglers.shift import ShiftVerdict
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.store.alarms import StepSeries

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "accuracy"


def _corpus_series() -> list[tuple[np.ndarray, np.ndarray]]:
    """Every rank's recorded step series (seconds, step numbers) of the accuracy corpus, clean and slowed runs."""
    out = []
    for path in sorted(CORPUS.glob("*/steps/rank-*.jsonl")):
        recs = sorted((json.loads(line) for line in path.read_text().splitlines() if line.strip()),
                      key=lambda r: r["step"])
        recs = [r for r in recs if r["step"] >= 2]
        out.append((np.array([(r["end_ns"] - r["start_ns"]) / 1e9 for r in recs]),
                    np.array([r["step"] for r in recs], dtype=np.int64)))
    return out


def _textbook_change_point(series: pd.Series) -> ChangePoint | None:
    """The change point and its verdict written with numpy's own median, corrcoef, unique and percentile (what the
    detector computed before it was made lean): the reference the one detector must equal exactly."""
    y = series.to_numpy(dtype=float)
    split = best_split(y)
    if split is None:
        return None
    best, scanned = split
    before, after = y[:best], y[best:]
    b, a = float(np.median(before)), float(np.median(after))
    if b <= 0 or a / b - 1.0 < threshold("degradation.rise"):
        return None
    assert min(len(before), len(after)) >= threshold_int("shift.min_side")
    residuals = np.concatenate([before - np.median(before), after - np.median(after)])
    r = 0.0
    if len(residuals) >= 3 and float(np.std(residuals)) != 0.0:
        r = float(np.corrcoef(residuals[:-1], residuals[1:])[0, 1])
        r = 0.0 if r != r else min(r + (1.0 + 3.0 * r) / len(residuals), 0.95)
    r = max(r, 0.0)
    shrink = math.sqrt((1.0 - r) / (1.0 + r))
    pooled = np.concatenate([before, after])
    order = pooled.argsort(kind="stable")
    ranks = np.empty(len(pooled), dtype=float)
    ranks[order] = np.arange(1, len(pooled) + 1, dtype=float)
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    ranks = (np.bincount(inverse, weights=ranks) / counts)[inverse]
    n1, n2 = len(before), len(after)
    n = n1 + n2
    u_after = float(ranks[n1:].sum()) - n2 * (n2 + 1) / 2.0
    variance = n1 * n2 / 12.0 * ((n + 1) - float((counts ** 3 - counts).sum()) / (n * (n - 1)))
    z = (u_after - n1 * n2 / 2.0 - 0.5) / math.sqrt(variance) * shrink if variance > 0 else -math.inf
    p = min(1.0, 0.5 * math.erfc(z / math.sqrt(2.0)) * max(scanned, 1))
    upper = float(np.percentile(before, 75))
    half = len(after) // 2
    sustained = all(float(np.median(part)) > upper for part in (after[:half], after[half:]))
    alpha = threshold("shift.alpha")
    reason = ("the later steps came back to the earlier level: a stretch of slow steps, not a lasting slowdown"
              if not sustained else f"a rise this size appears by chance in {100 * p:.0f}% of runs with this much "
              "step-to-step variation: record more steps to tell" if p > alpha else "")
    return ChangePoint(int(series.index[best]), b, a,
                       ShiftVerdict(sustained and p <= alpha, 1.0 - p, p, sustained, r, reason))


def test_the_change_point_equals_the_textbook_formulas_on_the_recorded_series() -> None:
    # GIVEN every recorded rank series of tests/fixtures/accuracy, cut as the rule cuts them (the last 10 x N steps
    # ending at every step)
    series = _corpus_series()
    assert len(series) >= 140
    compared = fired = 0
    for y, steps in series:
        for end in range(20, len(y) + 1):
            start = max(0, end - CONFIRM_WINDOWS * DEFAULT_WINDOW)
            # WHEN both judge the window: THEN the same split, step, medians and verdict, exactly
            offline = _textbook_change_point(pd.Series(y[start:end], index=steps[start:end]))
            assert change_point_of(y[start:end], steps[start:end]) == offline
            compared += 1
            fired += offline is not None and offline.verdict.significant
    assert compared > 400 and fired > 40  # slowed runs among them: significant verdicts were compared too


def test_the_change_point_equals_the_textbook_formulas_on_random_series() -> None:
    # GIVEN random series: noisy, rounded (ties), with and without a rise of random size at a random step
    rng = np.random.default_rng(7)
    for case in range(400):
        n = int(rng.integers(15, 130))
        y = 0.05 * (1 + 0.3 * rng.random(n))
        if case % 3 == 0:
            y = np.round(y, 3)
        if case % 2:
            y[int(rng.integers(0, n)):] *= 1 + 0.8 * rng.random()
        steps = np.arange(n, dtype=np.int64) + int(rng.integers(0, 10_000))
        # THEN the detector says exactly what the textbook formulas say
        assert change_point_of(y, steps) == _textbook_change_point(pd.Series(y, index=steps))


def _series(durations_ms: list[float]) -> StepSeries:
    return StepSeries(0, np.arange(len(durations_ms)), (np.array(durations_ms) * 1e6).astype(np.int64))


def test_a_declined_rank_is_confirmed_again_only_after_half_a_window_of_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a series whose trigger fires but whose confirmation says no (a stretch of slow steps that came back)
    calls: list[int] = []
    real = step_rules.change_point_of

    def counted(y: np.ndarray, steps: np.ndarray):  # type: ignore[no-untyped-def]
        calls.append(int(steps[-1]))
        return real(y, steps)

    monkeypatch.setattr(step_rules, "change_point_of", counted)
    base = [50.0 + (i % 5) for i in range(100)]
    noisy = base + [90.0, 50.0, 95.0, 51.0, 92.0, 50.0, 99.0, 52.0, 93.0, 50.0] * 2
    rechecks = Rechecks()
    assert series_alarm(_series(noisy), rechecks=rechecks) is None and len(calls) == 1
    # WHEN fewer than N / 2 steps came since: THEN no confirmation is asked
    for extra in range(1, recheck_steps(DEFAULT_WINDOW)):
        assert series_alarm(_series(noisy + [90.0] * extra), rechecks=rechecks) is None
    assert len(calls) == 1
    # WHEN N / 2 steps came: THEN it is asked again
    series_alarm(_series(noisy + [90.0] * recheck_steps(DEFAULT_WINDOW)), rechecks=rechecks)
    assert len(calls) == 2
    # WHEN the trigger falls back (its "no" is forgotten) and fires again one step later: THEN it is asked at once
    calm = noisy + [50.0 + (i % 5) for i in range(200)]
    assert series_alarm(_series(calm), rechecks=rechecks) is None
    assert 0 not in rechecks.declined_at and len(calls) == 2
    series_alarm(_series(calm + [95.0] * 4), rechecks=rechecks)
    assert len(calls) == 3


def test_with_rechecks_a_slowdown_fed_step_by_step_still_fires_at_the_step_it_began_at() -> None:
    # GIVEN noisy healthy steps, then a 40% slowdown from step 150, fed to the rule one step at a time
    rng = np.random.default_rng(3)
    durations = list(50 + rng.normal(0, 4, 150)) + list(70 + rng.normal(0, 4, 40))
    found: dict[str, tuple[int, int]] = {}
    for label, rechecks in (("plain", None), ("rechecks", Rechecks())):
        for end in range(2 * DEFAULT_WINDOW, len(durations) + 1):
            alarm = series_alarm(_series(durations[:end]), rechecks=rechecks)
            if alarm is not None:
                found[label] = (end, alarm.step)
                break
    # THEN both fire, at the same change point, the rechecked one at most N / 2 steps later
    assert set(found) == {"plain", "rechecks"}
    assert found["plain"][1] == found["rechecks"][1] and 148 <= found["plain"][1] <= 152
    assert found["plain"][0] <= found["rechecks"][0] <= found["plain"][0] + recheck_steps(DEFAULT_WINDOW)
