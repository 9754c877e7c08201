"""The step period of a sampled-stack burst (`analyzers/online/step_period.py`) and the coarse degradation rule
of burst periods (`analyzers/online/burst_rule.py`).

Real recordings (tests/fixtures/stack_bursts, `scripts/record_stack_bursts.py`): 4 s bursts at 100 Hz of both
ranks of an unhooked 2-rank gloo job (~100 ms steps), clean, with rank 1 SIGSTOPped 200 ms of every 250 ms, and
hung, and 2 s bursts of a ~120 ms loop stopped at random (`loaded-*`, `scripts/record_loaded_loop_bursts.py`);
`truth.json` holds the process's own mean step time over each burst (README.md there says how each was made). Synthetic bursts give exact ground truth:
a loop of stacks with jittered phase lengths, sampled at a rate, with samples missed.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from perftracker.analyzers.online.burst_rule import burst_alarm, series_alarm
from perftracker.analyzers.online.step_period import chance, estimate_period
from perftracker.collectors.stacks.chrometrace import read_burst
from perftracker.errors import InputError
from perftracker.store.alarms import StepSeries
from perftracker.store.stack_frames import StackBurst

BURSTS = Path(__file__).resolve().parents[1] / "fixtures" / "stack_bursts"
TRUTH = json.loads((BURSTS / "truth.json").read_text())
LOOP = ("<module> (train.py:10)", "main (train.py:50)")
PHASES = {"data": LOOP + ("next (loader.py:80)",), "forward": LOOP + ("forward (model.py:30)",),
          "backward": LOOP + ("backward (__init__.py:395)", "_engine_run_backward (graph.py:979)"),
          "optimizer": LOOP + ("step (sgd.py:120)",)}


def synthetic(period_s: float, seconds: float, rate_hz: float, jitter: float, miss: float, seed: int,
              shares: tuple[float, ...] = (0.2, 0.3, 0.4, 0.1)) -> StackBurst:
    """A loop of the four phases (each its share of the period, jittered by `jitter` of it), sampled at `rate_hz`
    with each sample missed at probability `miss`; written as py-spy writes it (a stack only when it changes)."""
    rng = random.Random(seed)
    bounds: list[tuple[float, tuple[str, ...]]] = []
    t = rng.uniform(0, period_s)
    while t < seconds + period_s:
        for stack, share in zip(PHASES.values(), shares):
            bounds.append((t, stack))
            t += share * period_s * (1 + rng.uniform(-jitter, jitter))
    times = np.arange(0, seconds, 1 / rate_hz)
    starts = np.array([b for b, _ in bounds])
    change_s: list[float] = []
    stacks: list[tuple[str, ...]] = []
    for at in times:
        stack = bounds[int(np.searchsorted(starts, at, side="right")) - 1][1] if at >= starts[0] else LOOP
        if rng.random() < miss:
            stack = ()
        if not stacks or stacks[-1] != stack:
            change_s.append(float(at))
            stacks.append(stack)
    return StackBurst(0, rate_hz, tuple(change_s), tuple(stacks), seconds)


@pytest.mark.parametrize("period_s", [0.06, 0.1, 0.35, 1.1])
def test_synthetic_loops_with_jitter_and_misses_give_their_period(period_s: float) -> None:
    # GIVEN a loop of `period_s` with 20% jitter per phase, sampled 5 s at 50 Hz with 10% of samples missed
    burst = synthetic(period_s, 5.0, 50.0, jitter=0.2, miss=0.1, seed=int(period_s * 1000))
    # WHEN its period is estimated
    found = estimate_period(burst)
    # THEN it is the loop's, within 5%, with a clear confidence
    assert found is not None
    assert found.period_s == pytest.approx(period_s, rel=0.05)
    assert found.confidence > 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_period_beyond_a_quarter_of_the_burst_or_under_three_samples_is_not_claimed(seed: int) -> None:
    # GIVEN loops of 2 s and of 40 ms, sampled 5 s at 50 Hz (the limits: 60 ms .. 1.25 s)
    for period_s in (2.0, 1.6, 0.04):
        # THEN no period is made up for them
        assert estimate_period(synthetic(period_s, 5.0, 50.0, jitter=0.05, miss=0.0, seed=seed)) is None, period_s


def test_one_stack_all_along_or_random_stacks_have_no_period() -> None:
    # GIVEN a thread asleep in one stack, and one that jumps between stacks at random
    idle = StackBurst(0, 50.0, (0.0,), (LOOP + ("sleep (time.py:1)",),), 5.0)
    rng = random.Random(7)
    change = tuple(i / 50 for i in range(250))
    noisy = StackBurst(0, 50.0, change, tuple(rng.choice(list(PHASES.values())) for _ in change), 5.0)
    # THEN neither has a period
    assert estimate_period(idle) is None
    assert estimate_period(noisy) is None


def _burst(tmp_path: Path, name: str) -> StackBurst:
    raw = tmp_path / name.replace(".gz", "")
    raw.write_bytes(gzip.decompress((BURSTS / name).read_bytes()))
    return read_burst(raw, TRUTH[name]["rank"], TRUTH[name]["rate_hz"])


@pytest.mark.parametrize("name", sorted(n for n, t in TRUTH.items() if t["scenario"] in ("clean", "slowed")))
def test_recorded_bursts_of_a_real_job_give_its_step_time(tmp_path: Path, name: str) -> None:
    # GIVEN a real 4 s burst of one rank of a stepping job (clean, or slowed by a SIGSTOP duty cycle)
    burst = _burst(tmp_path, name)
    # WHEN its period is estimated, THEN it is the job's own mean step time over the burst, within 20%
    found = estimate_period(burst)
    assert found is not None, name
    assert found.period_s == pytest.approx(TRUTH[name]["mean_step_s"], rel=0.2)


@pytest.mark.parametrize("name", sorted(n for n, t in TRUTH.items() if t["scenario"] == "loaded"))
def test_recorded_bursts_of_a_descheduled_loop_give_its_period_not_its_second_harmonic(tmp_path: Path,
                                                                                       name: str) -> None:
    # GIVEN a real 2 s burst of a ~120 ms loop stopped at random (whose Z at 1/P fell under MIN_Z, at 2/P did not)
    burst = _burst(tmp_path, name)
    # WHEN its period is estimated
    found = estimate_period(burst)
    # THEN it is the loop's own mean iteration within 20% (the live test's margin), not half of it
    assert found is not None, name
    assert found.period_s == pytest.approx(TRUTH[name]["mean_step_s"], rel=0.2)


def test_a_periodic_loop_is_never_taken_for_twice_its_period() -> None:
    # GIVEN synthetic loops (exact truth) with jitter and misses, whose entries cancel at half their frequency
    doubled = []
    for seed in range(12):
        for period_s in (0.06, 0.12, 0.3):
            found = estimate_period(synthetic(period_s, 2.0, 100.0, jitter=0.3, miss=0.2, seed=seed))
            # THEN the sub-harmonic check never doubles their period
            if found is not None and found.period_s > 1.5 * period_s:
                doubled.append((seed, period_s, found.period_s))
    assert doubled == []


def test_the_chance_of_a_pooled_rayleigh_z_is_the_gamma_tail() -> None:
    # GIVEN one stack (Exp(1)) and two stacks (Gamma(2, 1)): THEN P(Z >= z) is exp(-z) and exp(-z)(1 + z)
    assert chance(3.0, 1) == pytest.approx(np.exp(-3.0))
    assert chance(7.4, 2) == pytest.approx(np.exp(-7.4) * 8.4)
    assert chance(0.0, 5) == 1.0


@pytest.mark.parametrize("name", sorted(n for n, t in TRUTH.items() if t["scenario"] == "hung"))
def test_recorded_bursts_of_a_hung_job_have_no_period(tmp_path: Path, name: str) -> None:
    # GIVEN a real burst of a rank of a hung job (rank 0 asleep for good, rank 1 waiting in the all-reduce)
    # THEN it shows no period
    assert estimate_period(_burst(tmp_path, name)) is None


def test_the_reader_keeps_the_main_thread_in_time_order_and_says_what_a_bad_file_is(tmp_path: Path) -> None:
    # GIVEN a recorded burst, and a file that is not one
    burst = _burst(tmp_path, "clean-0-rank0.json.gz")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    # THEN the stacks come in time order, without py-spy's thread frame, ending before the recording's end
    assert list(burst.change_s) == sorted(burst.change_s) and burst.end_s >= burst.change_s[-1]
    assert all(not s or not s[0].startswith("thread (") for s in burst.stacks)
    assert any(s and s[-1].startswith("main (sample_job.py") for s in burst.stacks)
    # AND a bad file is an InputError naming it
    with pytest.raises(InputError, match="bad.json"):
        read_burst(bad, 0, 50.0)


def _series(values_ms: list[float], rank: int = 0) -> StepSeries:
    return StepSeries(rank, list(range(len(values_ms))), [int(v * 1e6) for v in values_ms])


def test_the_burst_rule_fires_on_a_sustained_rise_and_says_the_burst_it_began_at() -> None:
    # GIVEN 8 bursts near 100 ms, then 3 at 180 ms
    rng = random.Random(1)
    healthy = [100 * (1 + rng.uniform(-0.03, 0.03)) for _ in range(8)]
    # WHEN the rule looks, THEN it fires naming the rank, the burst it began at and the source
    alarm = burst_alarm([_series(healthy + [180, 182, 178])], window=3, rise=0.2)
    assert alarm is not None and alarm.ranks == (0,) and alarm.step == 8 and alarm.source == "stacks"
    assert "sampled stacks" in alarm.text
    # AND not while only one or two bursts of the window rose, nor on the healthy bursts alone
    assert series_alarm(_series(healthy + [100, 250, 104]), 3, 0.2) is None
    assert series_alarm(_series(healthy + [101, 180, 182]), 3, 0.2) is None
    assert series_alarm(_series(healthy), 3, 0.2) is None


def test_the_burst_rule_stays_quiet_within_the_bursts_own_noise() -> None:
    # GIVEN bursts that wander by +-30% at random (a loaded machine), judged after each new burst
    rng = random.Random(5)
    values = [100 * (1 + rng.uniform(-0.3, 0.3)) for _ in range(60)]
    fired = [k for k in range(6, len(values)) if series_alarm(_series(values[:k]), 3, 0.2) is not None]
    # THEN the rise never beats four times their spread
    assert fired == []
