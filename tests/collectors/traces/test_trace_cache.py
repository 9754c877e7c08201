"""The per-rank cache is keyed by what a trace holds: moved or copied traces hit it, a changed file misses it,
and a run cut short (or one with more ranks) parses only the traces no whole entry holds.

Promise checked (collectors/traces/trace_cache.py, trace_map.load_one): parses are counted by wrapping
the parser itself, so `cached` cannot claim a hit that parsed; the tables read back equal the parsed ones;
an entry a crash left half-written is parsed again and rewritten; a cache folder that cannot be written
costs the cache, not the file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from synth import SynthSpec, generate

from perftracker.collectors.engines import LocalEngine, MapArgs
from perftracker.collectors.traces import trace_map
from perftracker.collectors.traces.comm_kernels import cached_comm_kernels
from perftracker.collectors.traces.trace_cache import CacheEntry, content_source
from perftracker.collectors.traces.trace_map import FileResult

RANKS = 4


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GIVEN 4 small synthetic ranks, plain JSON (so a test can change a byte)."""
    root = tmp_path_factory.mktemp("cache-traces")
    generate(SynthSpec(ranks=RANKS, steps=2, kernels_per_step=8, collectives_per_step=2, seed=3), root / "traces",
             gzip=False, truth_path=root / "ground_truth.json")
    return root / "traces"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every trace the map step parses (in this process: the tests map with one worker)."""
    seen: list[Path] = []
    real: Callable[[Path], Any] = trace_map.parse_trace

    def counting(path: Path) -> Any:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(trace_map, "parse_trace", counting)
    return seen


def _map(folder: Path, cache: Path | None) -> list[FileResult]:
    paths = [str(p) for p in sorted(folder.glob("rank-*.json"))]
    return LocalEngine(workers=1).map(paths, MapArgs(cache_dir=cache), lambda done, total: None)


def _events(result: FileResult) -> pd.DataFrame:
    return result.events if result.events is not None else pd.read_parquet(result.cache_stem + ".events.parquet")


def test_moved_and_copied_traces_hit_the_cache(traces: Path, tmp_path: Path, parses: list[Path]) -> None:
    # GIVEN the traces mapped once with a cache
    first = _map(traces, tmp_path / "cache")
    assert len(parses) == RANKS and not any(r.cached for r in first)
    # WHEN they are copied elsewhere, with new mtimes, and mapped again
    copy = tmp_path / "elsewhere" / "traces"
    copy.mkdir(parents=True)
    for path in traces.glob("rank-*.json"):
        shutil.copyfile(path, copy / path.name)
        os.utime(copy / path.name, (1_000_000, 1_000_000))
    again = _map(copy, tmp_path / "cache")
    # THEN nothing is parsed again, and the tables read back are the parsed ones
    assert len(parses) == RANKS and all(r.cached for r in again)
    assert [r.path for r in again] == [str(copy / Path(r.path).name) for r in first]
    for a, b in zip(first, again):
        pd.testing.assert_frame_equal(_events(a), _events(b))
        assert a.facts == b.facts


def test_a_changed_file_misses_the_cache(traces: Path, tmp_path: Path, parses: list[Path]) -> None:
    # GIVEN a cached copy of the traces
    copy = shutil.copytree(traces, tmp_path / "traces")
    _map(copy, tmp_path / "cache")
    parses.clear()
    # WHEN one file changes by one byte (same name, same events: a space after its first brace)
    changed = copy / "rank-2.pt.trace.json"
    text = changed.read_bytes()
    changed.write_bytes(text[:1] + b" " + text[1:])
    results = _map(copy, tmp_path / "cache")
    # THEN that file alone is parsed again
    assert parses == [changed]
    assert [Path(r.path).name for r in results if not r.cached] == [changed.name]


def test_a_rerun_after_a_crash_or_with_more_ranks_parses_only_what_is_missing(traces: Path, tmp_path: Path,
                                                                            parses: list[Path]) -> None:
    # GIVEN a first run that saw ranks 0 and 1, and a crash that left rank 2's entry half written
    # (its events Parquet, cut, and no meta)
    cache = tmp_path / "cache"
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("rank-0.pt.trace.json", "rank-1.pt.trace.json"):
        shutil.copyfile(traces / name, partial / name)
    _map(partial, cache)
    crashed = CacheEntry(cache, content_source(traces / "rank-2.pt.trace.json", cached_comm_kernels((), ())).key)
    crashed.events_path.write_bytes(b"PAR1 cut short")
    parses.clear()
    # WHEN all 4 ranks are mapped
    results = _map(traces, cache)
    # THEN only ranks 2 and 3 are parsed, rank 2's entry is whole again, and no temporary file is left
    assert sorted(p.name for p in parses) == ["rank-2.pt.trace.json", "rank-3.pt.trace.json"]
    assert [r.cached for r in results] == [True, True, False, False]
    facts = results[2].facts
    assert crashed.lookup()[0] is not None and facts is not None and len(crashed.read_tables()[0]) == facts.n_events
    assert not list(cache.glob("*.tmp"))


def test_a_cache_folder_that_cannot_be_written_costs_the_cache_not_the_file(traces: Path, tmp_path: Path) -> None:
    # GIVEN a cache "folder" under a file WHEN a trace is mapped
    (tmp_path / "file").write_text("not a folder")
    result = _map(traces, tmp_path / "file" / "cache")[0]
    # THEN its tables come back in the result, with a note that says it was not cached
    assert result.ok and not result.cached and result.events is not None and len(result.events)
    assert any(message.startswith("not cached: cannot write to") for message, _ in result.notes)
