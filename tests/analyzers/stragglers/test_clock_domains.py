"""Ranks that share a host name but not a clock (containers with repeated host names): measured, kept apart, said.

The probe of issue 32 rebuilt on the real gloo sample (4 ranks of one host, `vm`): one rank's trace shifted
by 50 ms with its host name kept. Pooled as one host's one clock, the shift erased the verdict (rank 2's
cost tripled with rank 2 shifted; the straggler's info vanished with rank 0 shifted), with no note.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from perftracker import api

SAMPLE = Path(__file__).resolve().parents[3] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
SPLIT_KEY = "straggler:clock-domains:vm"


def _edited(tmp_path: Path, rank: int, edit: Any) -> Path:
    """A copy of the real sample with `edit(event)` applied to every event of one rank's trace (host kept)."""
    run = tmp_path / f"run-{rank}"
    shutil.copytree(SAMPLE, run)
    trace = next((run / "traces").glob(f"rank-{rank}.*"))
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    for event in doc["traceEvents"]:
        edit(event)
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return run


def _shift(ms: float) -> Any:
    def edit(event: dict[str, Any]) -> None:
        if "ts" in event:
            event["ts"] += ms * 1000.0  # the trace's microseconds: another machine's clock
    return edit


def _verdict(run: api.Run) -> dict[str, tuple[str, tuple[int, ...], float]]:
    """Every finding but the clock's own notes: key -> (severity, ranks, cost per step in s)."""
    return {f.key: (f.severity.label, f.ranks, f.cost.seconds_per_step if f.cost else 0.0) for f in run.findings
            if f.key != "straggler:alignment" and not f.key.startswith("straggler:clock-domains")}


@pytest.fixture(scope="module")
def unshifted() -> api.Run:
    return api.analyze(SAMPLE, cache=False, workers=1)


def test_one_host_with_one_clock_is_not_split(unshifted: api.Run) -> None:
    # GIVEN the real sample: 4 ranks on one host, one clock
    # WHEN analyzed
    # THEN no clock-domain note, and the ranks share one offset
    assert not [f for f in unshifted.findings if f.key.startswith("straggler:clock-domains")]
    alignment = next(f for f in unshifted.findings if f.key == "straggler:alignment")
    assert len(set(alignment.evidence["offsets_ns"].values())) == 1


@pytest.mark.parametrize(("rank", "ms"), [(2, 50.0), (0, 50.0), (1, -50.0)])
def test_a_rank_on_another_clock_behind_one_host_name_is_aligned_apart_and_said(
        tmp_path: Path, unshifted: api.Run, rank: int, ms: float) -> None:
    # GIVEN the sample with one rank's trace on a clock 50 ms off, its host name kept
    run = _edited(tmp_path, rank, _shift(ms))
    # WHEN analyzed
    shifted = api.analyze(run, cache=False, workers=1)
    # THEN the verdict is that of the unshifted run: same findings, severities, ranks, costs (to 10%) ...
    before, after = _verdict(unshifted), _verdict(shifted)
    assert before.keys() == after.keys()
    for key, (severity, ranks, cost) in before.items():
        assert after[key][:2] == (severity, ranks), key
        assert after[key][2] == pytest.approx(cost, rel=0.1, abs=1e-4), key
    # ... and a note names the rank and the offset measured (to 1 ms), relative to the other three
    note = next(f for f in shifted.findings if f.key == SPLIT_KEY)
    domains = note.evidence["clock_domains"]
    assert [d["ranks"] for d in domains] == [sorted({0, 1, 2, 3} - {rank}), [rank]]
    assert domains[1]["offset_ns"] / 1e6 == pytest.approx(ms, abs=1.0)
    assert f"rank {rank} at {domains[1]['offset_ns'] / 1e6:+.2f} ms" in note.title


def test_late_collective_ends_on_one_clock_are_not_taken_for_another_clock(tmp_path: Path) -> None:
    # GIVEN the sample where rank 1's collectives end 20 ms later (a starved progress thread), same clock
    def later_end(event: dict[str, Any]) -> None:
        if str(event.get("name", "")).startswith("gloo:") and "dur" in event:
            event["dur"] += 20_000.0
    run = _edited(tmp_path, 1, later_end)
    # WHEN analyzed
    result = api.analyze(run, cache=False, workers=1)
    # THEN the host keeps its one clock: no clock-domain note, one offset for all
    assert not [f for f in result.findings if f.key.startswith("straggler:clock-domains")]
    alignment = next(f for f in result.findings if f.key == "straggler:alignment")
    assert len(set(alignment.evidence["offsets_ns"].values())) == 1
