"""What the loaders learn about a run lands in the Store's typed RunInfo, and that is what analyzers read."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields, replace
from pathlib import Path

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.hang import analyze_hang
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import RunInfo, Store

REPO = Path(__file__).resolve().parents[2]
STALL = REPO / "sample_traces" / "gloo-4rank-stall-rank2"
POSTMORTEM = REPO / "tests" / "fixtures" / "postmortem"


def test_every_field_starts_empty_and_learn_takes_only_what_a_loader_filled() -> None:
    # GIVEN a RunInfo with a manifest, and what a second loader learned (a profile, nothing else)
    info = RunInfo(manifest={"exit_code": 1})
    # THEN a fresh RunInfo holds nothing
    assert not any(getattr(RunInfo(), f.name) for f in fields(RunInfo))
    # WHEN the second loader's facts are merged
    info.learn(RunInfo(nccl_profile={"name": "generic"}))
    # THEN both are kept: the empty fields of the second did not wipe the first's
    assert info.manifest == {"exit_code": 1} and info.nccl_profile == {"name": "generic"}


def test_loading_a_run_directory_fills_the_run_info() -> None:
    # GIVEN the sample stall run (manifest, step files of 4 ranks on host "vm", stack snapshots)
    # WHEN it is loaded
    store = load_path(STALL, LoadOptions(cache_dir=None, workers=1))
    # THEN the path, the manifest and the step files' hosts (keyed by int rank) are in the RunInfo
    info = store.run_info
    assert info.input == str(STALL)
    assert info.manifest["exit_code"] == 1 and info.manifest["format"] == "perftracker-run"
    assert info.step_hosts == {0: "vm", 1: "vm", 2: "vm", 3: "vm"}
    # AND nothing it has no input for: no sysfs root given, no counters, no flight recorder
    assert info.sysfs == [] and info.counter_sources == {} and info.fr_pg_status == {}
    assert info.nccl_profile["name"] == "generic"


def test_postmortem_inputs_fill_the_flight_recorder_and_watchdog_fields(tmp_path: Path) -> None:
    # GIVEN a job log with watchdog lines, and flight-recorder dumps
    shutil.copytree(POSTMORTEM / "nccl_timeout", tmp_path / "log")
    shutil.copytree(POSTMORTEM / "fr_mismatch", tmp_path / "fr")
    # WHEN each is loaded
    log = load_path(tmp_path / "log", LoadOptions(cache_dir=None, workers=1)).run_info
    fr = load_path(tmp_path / "fr", LoadOptions(cache_dir=None, workers=1)).run_info
    # THEN the watchdog progress is keyed by rank and names the group and sequence numbers
    assert log.watchdog_progress and all(set(p) >= {"pg", "seq", "last_enqueued", "last_completed"}
                                         for p in log.watchdog_progress.values())
    # AND the dumps give each rank's process-group status and the groups' configuration
    assert fr.fr_pg_status and fr.fr_pg_config


def _snapshot(run: Path, rank: int, frames: list[tuple[str, str, int]]) -> None:
    """One stacks/<snapshot>/rank-<r>.json as the stack sampler writes it (py-spy --json threads)."""
    thread = {"pid": 1000 + rank, "thread_id": 7, "thread_name": None, "os_thread_id": 1000 + rank,
              "active": False, "owns_gil": False, "process_info": None,
              "frames": [{"name": n, "filename": f, "short_filename": f, "line": ln, "module": None, "locals": None}
                         for n, f, ln in frames]}
    path = run / "stacks" / "20250101T000010.000Z-hang" / f"rank-{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "pid": 1000 + rank, "host": "node-a", "ts_ns": 1_764_000_000 * 10**9,
                                "mode": "nonblocking", "world_size": 4, "threads": [thread]}))


def test_analyzers_read_the_run_info(tmp_path: Path) -> None:
    # GIVEN a hang snapshot: ranks 0, 2, 3 wait in all_reduce, rank 1 sleeps elsewhere
    for rank in (0, 2, 3):
        _snapshot(tmp_path, rank, [("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
                                   ("<module>", "train.py", 66)])
    _snapshot(tmp_path, 1, [("hang_or_sleep", "train.py", 44), ("<module>", "train.py", 64)])
    store = load_path(tmp_path, LoadOptions(cache_dir=None, workers=1))
    # WHEN the hang analyzer judges it, and again with a RunInfo whose manifest says the job exited 0
    stuck = analyze_hang(Analysis(store))
    finished = Store(tables=store.tables, notes=store.notes,
                     run_info=replace(store.run_info, manifest={"exit_code": 0}))
    # THEN rank 1 is named, and for a job that ended normally the late stall is its shutdown, not a hang
    assert [f.ranks for f in stuck] == [(1,)]
    assert analyze_hang(Analysis(finished)) == []
