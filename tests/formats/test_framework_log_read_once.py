"""`analyze job.log` reads a training log once: its step times and the throughput it reports come from one pass
over its lines (collectors/framework_logs.py), not one reader per table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import perftracker
from perftracker.bounded import LineBlocks

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "framework_logs"


@pytest.mark.parametrize("name", ["megatron.log", "torchtitan.log"])
def test_a_framework_log_is_read_once_for_steps_and_throughput(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real log whose lines carry both step times and reported TFLOP/s, and every line reader counted
    reads: Counter[str] = Counter()
    iterate = LineBlocks.__iter__

    def counted(self: LineBlocks) -> Iterator[tuple[int, list[str]]]:
        reads[Path(self.path).name] += 1
        return iterate(self)

    monkeypatch.setattr(LineBlocks, "__iter__", counted)
    # WHEN it is loaded as analyze loads it
    with perftracker.load(LOGS / name, cache=False) as store:
        steps, throughput = store.steps, store.tables.get("reported_throughput")
    # THEN both tables are filled, from one read of its lines
    assert not steps.empty and throughput is not None and not throughput.empty
    assert reads[name] == 1, reads
