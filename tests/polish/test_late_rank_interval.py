"""Late-rank advice never compares against a negative time ("worked 86.1 ms against -17187 us on the median rank").

The interval before a rank's arrival at a collective starts where its previous collective ended; with
collectives that overlap (async ones on other streams), that end can come after this arrival, and the
interval was negative.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.analyzers.stragglers.late_rank import _intervals


class _Analysis:
    """What `_intervals` asks of an analysis: the clock offsets view and the store's steps."""

    def __init__(self) -> None:
        self.store = type("S", (), {"steps": pd.DataFrame(columns=["rank", "step", "start_ns", "source"])})()

    def view(self, fn: Any) -> dict[int, int]:
        return {}


def test_an_overlapping_previous_collective_does_not_make_the_interval_negative() -> None:
    # GIVEN rank 0 last at collective B; on the median rank 1, collective A (arrived at 100, 500 ns long) is
    # still running when it arrives at B (at 300): its previous end (600) is after its arrival
    rows = [  # rank, instance, arrival, dur, last rank, wait
        (0, "A", 100, 50, 0, 0), (1, "A", 100, 500, 0, 0), (2, "A", 100, 50, 0, 0),
        (0, "B", 900, 50, 0, 0), (1, "B", 300, 50, 0, 600), (2, "B", 310, 50, 0, 590),
    ]
    table = pd.DataFrame(rows, columns=["rank", "instance", "arrival_ns", "dur_ns", "last_rank", "wait_ns"])
    table["step"] = 0
    # WHEN the intervals before rank 0's late arrivals are taken
    spans = _intervals(_Analysis(), table, 0)  # type: ignore[arg-type]
    # THEN every interval, the rank's and the median member's, ends at or after it starts
    assert spans and all(hi >= lo and mhi >= mlo for _, lo, hi, _, mlo, mhi in spans), spans
