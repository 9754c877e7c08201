"""Events on disk (`store/event_parts.py`: one Parquet row group per trace) read as the resident table would hold them.

The loader writes the events to disk from `LoadOptions.spill_events_from` rows on (0: always); every analysis
over such a Store gives the tables and findings of the same Store with its events in memory, and the folder
the parts live in is gone when the analysis ends, whether it finished or failed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from api_helpers import analyzed
from synth import SynthSpec, generate

from perftracker import pipeline
from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.cpu_ops import cpu_calls_view
from perftracker.analyzers.traces.gpu_time import gpu_work_view
from perftracker.analyzers.traces.kernels import kernel_work_view
from perftracker.collectors import loading
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.pipeline import analyze
from perftracker.store import Store
from perftracker.store.event_parts import EventParts
from perftracker.store.schema import conform

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
IN_MEMORY = 1 << 40


@pytest.fixture(scope="module")
def synthetic_11(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """11 small synthetic GPU ranks: rank-10.* sorts before rank-2.*, so the events are not in rank order."""
    out = tmp_path_factory.mktemp("synth11")
    generate(SynthSpec(ranks=11, steps=3, kernels_per_step=8, collectives_per_step=2, stragglers={10: 1500.0}, seed=5),
             out / "traces", truth_path=out / "truth.json")
    return out / "traces"


def _everything(store: Store) -> tuple[dict[str, object], list[str]]:
    analysis = Analysis(store)
    findings, _, failed = analyze(analysis)
    for fn in (cpu_calls_view, gpu_work_view, kernel_work_view):
        analysis.view(fn)
    views = {getattr(fn, "__qualname__", str(fn)): value for fn, value in analysis._views.items()}
    return views, [repr(f) for f in findings] + [n.message for n in failed]


@pytest.mark.parametrize("which", ["synthetic-gpu-4rank-thermal", "synthetic"])
def test_events_on_disk_give_the_tables_and_findings_of_events_in_memory(which: str, synthetic_11: Path) -> None:
    # GIVEN a multi-rank run loaded twice: its events in memory, and as Parquet parts on disk
    path = synthetic_11 if which == "synthetic" else SAMPLES / which
    resident = load_path(path, LoadOptions(workers=1, spill_events_from=IN_MEMORY))
    on_disk = load_path(path, LoadOptions(workers=1, spill_events_from=0))
    assert resident.event_parts is None and on_disk.event_parts is not None and on_disk.n_events == len(resident.events)
    try:
        # THEN every read of the events gives the same rows, dtypes and row labels
        pd.testing.assert_frame_equal(on_disk.events, resident.events)
        assert on_disk.event_ranks() == resident.event_ranks()
        for rank in resident.event_ranks():
            pd.testing.assert_frame_equal(on_disk.rank_events(rank), resident.rank_events(rank))
        some = resident.event_ranks()[::2]
        pd.testing.assert_frame_equal(on_disk.ranks_events(some), resident.ranks_events(some))
        pd.testing.assert_frame_equal(on_disk.event_columns(["name", "rank"]), resident.event_columns(["name", "rank"]))
        comm = lambda ev: (ev["kind"] == "comm").to_numpy() | (ev["dur_ns"] > 10_000).to_numpy()  # noqa: E731
        pd.testing.assert_frame_equal(on_disk.select_events(comm, ["rank", "name"], ["kind", "dur_ns", "rank", "name"]),
                                      resident.select_events(comm, ["rank", "name"], ["kind", "dur_ns", "rank", "name"]))
        # AND WHEN every analyzer and view runs over each, THEN every table and finding is the same
        from_disk, disk_findings = _everything(on_disk)
        from_memory, memory_findings = _everything(resident)
        assert from_disk.keys() == from_memory.keys()
        for name, value in from_memory.items():
            if isinstance(value, pd.DataFrame):
                pd.testing.assert_frame_equal(from_disk[name], value, obj=name)  # type: ignore[arg-type]
        assert disk_findings == memory_findings
    finally:
        on_disk.close()
    assert not on_disk.event_parts.folder.exists()


def _part(ranks: list[int], names: list[str], categories: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame({"rank": ranks, "start_ns": np.arange(len(ranks)) * 10, "dur_ns": 1, "kind": "compute",
                          "name": pd.Categorical(names, categories=categories)})
    return conform("events", frame)


def test_rank_events_reads_the_right_rank_from_parquet() -> None:
    # GIVEN parts of ranks 2, 0, 2 (a second window) and 7, one without rows, their names of other categories
    parts = [_part([2, 2], ["b", "a"], ["a", "b"]), _part([0, 0, 0], ["c", "a", "c"], ["c", "a"]),
             _part([], [], ["z"]), _part([2], ["b"], ["b"]), _part([7], ["d"], ["d", "a"])]
    store = Store()
    store.event_parts = EventParts()
    for frame in parts:
        store.event_parts.add(frame, int(frame["rank"].iloc[0]) if len(frame) else 5)
    store.event_parts.finish()
    resident = Store()
    resident.set_table("events", loading._concat([f.copy() for f in parts]))
    try:
        # WHEN one rank's events are asked for
        two = store.rank_events(2)
        # THEN they are that rank's rows, in table order, with their row labels and the table's categories
        assert store.event_ranks() == [0, 2, 7] and store.rank_rows(2) == 3 and store.n_events == 7
        assert two.index.tolist() == [0, 1, 5] and two["name"].astype(str).tolist() == ["b", "a", "b"]
        assert two["name"].dtype == resident.events["name"].dtype
        assert store.rank_events(0)["start_ns"].tolist() == [0, 10, 20]
        pd.testing.assert_frame_equal(store.ranks_events([7, 2]), resident.ranks_events([7, 2]))
        pd.testing.assert_frame_equal(store.events, resident.events)
        missing = store.rank_events(5)
        assert missing.empty and list(missing.columns) == list(resident.events.columns)
        assert store.events_schema(["name"])["name"].dtype == resident.events["name"].dtype
    finally:
        store.close()


def _leftovers(folder: Path) -> list[Path]:
    return sorted(folder.glob("perftracker-events-*"))


def test_no_cache_leaves_no_folder_behind_also_when_the_analysis_fails(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN temporary folders made under tmp_path, and events written to disk at any size
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    options = LoadOptions(cache_dir=None, workers=1, spill_events_from=0)
    sample = SAMPLES / "synthetic-gpu-4rank-thermal"
    seen: list[Path] = []
    plain_analyze = pipeline.analyze

    def watching(analysis: Analysis) -> object:
        seen.extend(_leftovers(temp))  # the parts exist while the analysis runs
        return plain_analyze(analysis)

    monkeypatch.setattr(pipeline, "analyze", watching)
    # WHEN an analysis finishes
    analyzed(sample, tmp_path / "out", cache=False, workers=1, spill_events_from=0)
    # THEN its parts were on disk during it, and are gone after it
    assert seen and not _leftovers(temp)

    # WHEN an analysis fails half-way (an error past the analyzers)
    def failing(analysis: Analysis) -> object:
        raise RuntimeError("half-way")

    monkeypatch.setattr(pipeline, "analyze", failing)
    with pytest.raises(RuntimeError):
        analyzed(sample, tmp_path / "out2", cache=False, workers=1, spill_events_from=0)
    # AND WHEN loading fails after the events were written
    def broken(*_: object) -> None:
        raise RuntimeError("while loading")

    monkeypatch.setattr(loading, "usable_tables", broken)  # called once every input kind was loaded
    with pytest.raises(RuntimeError):
        load_path(sample, options)
    # THEN no folder is left behind either
    assert not _leftovers(temp)
