"""Sustained slowdowns and periodic spikes from step files alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.passes import costed_findings
from perftracker.collectors.loading import LoadOptions, load_path


def write_steps(run: Path, durations: dict[int, np.ndarray], phases: dict[int, np.ndarray] | None = None) -> Path:
    (run / "steps").mkdir(parents=True)
    for rank, durs in durations.items():
        t = 1_700_000_000_000_000_000
        with open(run / "steps" / f"rank-{rank}.jsonl", "w") as fh:
            for step, d in enumerate(durs):
                rec = {"rank": rank, "step": step, "start_ns": t, "end_ns": t + int(d), "host": f"node-{rank // 2}"}
                if phases is not None:
                    rec["phases_ns"] = {"forward": int(phases[rank][step]), "backward": int(d - phases[rank][step])}
                fh.write(json.dumps(rec) + "\n")
                t += int(d)
    return run


def findings_of(run: Path, tmp: Path) -> list:
    return [f for f in costed_findings(Analysis(load_path(run, LoadOptions(workers=1)))) if f.analyzer == "degradation"]


def test_sustained_rise_is_found_at_its_step_and_names_the_host(tmp_path: Path) -> None:
    # GIVEN 2000 steps of ~100 ms on 4 ranks; from step 1840 rank 3's forward takes 12 ms longer
    rng = np.random.default_rng(0)
    durations, phases = {}, {}
    for rank in range(4):
        fwd = 30e6 + rng.normal(0, 1e6, 2000)
        if rank == 3:
            fwd[1840:] += 12e6
        phases[rank] = fwd
    for rank in range(4):  # synchronous training: every rank's step waits for the slowest forward
        durations[rank] = 70e6 + np.max([phases[r] for r in range(4)], axis=0) + rng.normal(0, 1e6, 2000)
    run = write_steps(tmp_path / "run", durations, phases)
    # WHEN analyzed
    found = findings_of(run, tmp_path / "s")
    # THEN one change point at step 1840 (+-5), naming rank 3 on node-1
    change = [f for f in found if f.evidence.get("change_step") is not None]
    assert len(change) == 1
    assert abs(change[0].evidence["change_step"] - 1840) <= 5
    assert change[0].ranks == (3,) and change[0].hosts == ("node-1",)
    assert "Slower since step" in change[0].title


def test_periodic_spikes_are_not_a_change_point(tmp_path: Path) -> None:
    # GIVEN a flat run with a 2 s checkpoint every 100 steps
    rng = np.random.default_rng(1)
    durs = 100e6 + rng.normal(0, 2e6, 1000)
    durs[99::100] += 2e9
    run = write_steps(tmp_path / "run", {0: durs, 1: durs + rng.normal(0, 1e6, 1000)})
    found = findings_of(run, tmp_path / "s")
    assert [f.evidence.get("period_steps") for f in found] == [100]
    assert not any("change_step" in f.evidence for f in found)


def test_a_late_doubling_is_a_change_point_not_spikes(tmp_path: Path) -> None:
    # GIVEN 190 steps of ~46 ms with little noise, whose last 54 take ~100 ms (a rank stopped 70% of the time
    # from step 136, as a real watched job showed): far above the median, but every one of them in a row
    rng = np.random.default_rng(3)
    durs = 46e6 + rng.normal(0, 0.5e6, 190)
    durs[136:] = 100e6 + rng.normal(0, 5e6, 54)
    run = write_steps(tmp_path / "run", {0: durs, 1: durs + rng.normal(0, 0.2e6, 190)})
    # WHEN analyzed
    found = findings_of(run, tmp_path / "s")
    # THEN it is one slowdown since step 136, not a set of spikes set aside
    change = [f for f in found if f.evidence.get("change_step") is not None]
    assert len(change) == 1 and abs(change[0].evidence["change_step"] - 136) <= 2, [f.title for f in found]
    assert not any("period_steps" in f.evidence for f in found)


def test_a_flat_noisy_run_has_no_findings(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    run = write_steps(tmp_path / "run", {r: 100e6 + rng.normal(0, 5e6, 500) for r in range(4)})
    assert findings_of(run, tmp_path / "s") == []


def test_a_temporary_slowdown_that_recovers_is_not_sustained(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    durs = 100e6 + rng.normal(0, 1e6, 600)
    durs[200:260] += 30e6
    run = write_steps(tmp_path / "run", {0: durs, 1: durs})
    assert not any("change_step" in f.evidence for f in findings_of(run, tmp_path / "s"))
