"""Views computed rank by rank (`Store.rank_events`, `analyzers/traces/per_rank.by_rank`) are the all-rank ones.

The all-rank computation is the same code with every rank's events handed over at once: `Store.rank_events`
and `Store.ranks_events` patched to return the whole events table and `Store.event_ranks` to name one rank,
so each per-rank loop runs once over all events (its filters by rank still apply), as the code did before
it went rank by rank. A chunk of one rank (`CHUNK_ROWS` 1) is the other extreme.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synth import SynthSpec, generate

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.traces import per_rank
from perftracker.analyzers.traces.cpu_ops import cpu_calls_view, launch_ops
from perftracker.analyzers.traces.gpu_time import gpu_work_view
from perftracker.analyzers.traces.kernels import kernel_work_view
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.pipeline import analyze
from perftracker.store import Store

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


@pytest.fixture(scope="module")
def synthetic_11(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """11 small synthetic ranks: rank-10.* sorts before rank-2.*, so the events are not in rank order."""
    out = tmp_path_factory.mktemp("synth12")
    generate(SynthSpec(ranks=11, steps=3, kernels_per_step=8, collectives_per_step=2, stragglers={10: 1500.0}, seed=5),
             out / "traces",
             truth_path=out / "truth.json")
    return out / "traces"


def _all_views(store: Store, hta_compat: bool) -> tuple[dict[str, object], list[str]]:
    analysis = Analysis(store, AnalysisOptions(hta_compat=hta_compat))
    findings, _, failed = analyze(analysis)
    for fn in (cpu_calls_view, gpu_work_view, kernel_work_view):
        analysis.view(fn)
    views = {getattr(fn, "__qualname__", str(fn)): value for fn, value in analysis._views.items()}
    return views, [repr(f) for f in findings] + [n.message for n in failed]


@pytest.mark.parametrize("which", ["sample", "synthetic"])
def test_views_rank_by_rank_equal_the_all_rank_ones(which: str, synthetic_11: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a multi-rank run (a sample with CPU-side collectives; synthetic GPU ranks out of rank order)
    path = SAMPLE if which == "sample" else synthetic_11
    store = load_path(path, LoadOptions(workers=1))
    assert len(store.event_ranks()) >= 4
    for hta_compat in (False,):  # --hta-compat changes no per-rank view (its GPU work is computed apart)
        # WHEN every view is computed rank by rank, and again with all ranks' events at once
        chunked, chunked_findings = _all_views(store, hta_compat)
        with monkeypatch.context() as patch:
            patch.setattr(Store, "rank_events", lambda self, rank: self.events)
            patch.setattr(Store, "ranks_events", lambda self, ranks: self.events)
            patch.setattr(Store, "event_ranks", lambda self: [0] if len(self.events) else [])
            all_ranks, all_rank_findings = _all_views(store, hta_compat)
        with monkeypatch.context() as patch:
            patch.setattr(per_rank, "CHUNK_ROWS", 1)
            one_by_one, one_by_one_findings = _all_views(store, hta_compat)
        # THEN every table (report views and internal ones) and every finding is the same
        assert chunked.keys() == all_ranks.keys() == one_by_one.keys()
        for name, value in chunked.items():
            if isinstance(value, pd.DataFrame):
                pd.testing.assert_frame_equal(value, all_ranks[name], obj=name)
                pd.testing.assert_frame_equal(one_by_one[name], all_ranks[name], obj=name)
        assert chunked_findings == all_rank_findings == one_by_one_findings


def test_kernel_work_joins_each_rank_to_its_own_launches(synthetic_11: Path) -> None:
    # GIVEN the synthetic ranks' GPU work and CPU launches
    analysis = Analysis(load_path(synthetic_11, LoadOptions(workers=1)))
    # WHEN the launching op is joined rank by rank
    work = analysis.view(kernel_work_view)
    # THEN it is the one join over all ranks' work and launches
    plain = analysis.view(gpu_work_view)
    joined = plain[["rank", "window", "correlation"]].merge(launch_ops(analysis.view(cpu_calls_view)), how="left",
                                                           on=["rank", "window", "correlation"])
    expected = joined["launched_by"].where(plain["correlation"].to_numpy() >= 0)
    assert work["launched_by"].notna().any()
    pd.testing.assert_series_equal(work["launched_by"].reset_index(drop=True), expected.reset_index(drop=True),
                                   check_names=False)


def test_rank_events_reads_the_right_rank() -> None:
    # GIVEN events whose ranks come in runs, one rank in two runs (two windows, or files out of order)
    store = Store()
    ranks = [2, 2, 0, 0, 0, 2, 7]
    store.set_table("events", pd.DataFrame({"rank": ranks, "start_ns": np.arange(len(ranks)) * 10,
                                            "dur_ns": 1, "kind": "compute", "name": "k"}))
    # WHEN one rank's events are asked for
    two = store.rank_events(2)
    # THEN they are exactly that rank's rows, in table order, with their row labels
    assert store.event_ranks() == [0, 2, 7]
    assert two.index.tolist() == [0, 1, 5] and set(two["rank"]) == {2}
    assert store.rank_events(0)["start_ns"].tolist() == [20, 30, 40]
    assert store.rank_events(7).index.tolist() == [6]
    assert store.ranks_events([7, 2]).index.tolist() == [0, 1, 5, 6] and store.rank_rows(2) == 3
    missing = store.rank_events(5)
    assert missing.empty and list(missing.columns) == list(store.events.columns)
    # AND a new events table is indexed again
    store.set_table("events", pd.DataFrame({"rank": [4, 4], "start_ns": [1, 2], "dur_ns": 1}))
    assert store.event_ranks() == [4] and store.rank_events(4)["start_ns"].tolist() == [1, 2]
    assert store.rank_events(2).empty


def test_rank_chunks_hold_whole_ranks_in_order() -> None:
    # GIVEN ranks of 5, 3, 4 and 9 rows
    sizes = {3: 4, 0: 5, 1: 3, 7: 9}
    # WHEN they are cut into chunks of at most 8 rows
    chunks = per_rank.rank_chunks(sizes, chunk_rows=8)
    # THEN each chunk is consecutive whole ranks, and a rank over the limit is a chunk of its own
    assert chunks == [[0, 1], [3], [7]]
    assert per_rank.rank_chunks({}, chunk_rows=8) == []
