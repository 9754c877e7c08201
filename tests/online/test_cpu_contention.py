"""CPU contention in an incident (analyzers/online/cpu_contention.py): the ranks' scheduler accounting around the
incident's window against the healthy baseline's, read from an incident's evidence as the loader finds it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding
from perftracker.analyzers.online.cpu_contention import analyze_cpu_contention
from perftracker.collectors.counters.sched import read_process, snapshot_record
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

S = 10**9


def _window(folder: Path, shares: dict[int, tuple[float, float]], seconds: float = 4.0, t0: int = 10**18) -> None:
    """Two snapshots per rank `seconds` apart whose deltas give (wait share, run share) of the window."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for rank, (wait, run) in shares.items():
        for k, at in enumerate((t0, t0 + int(seconds * S))):
            lines.append(json.dumps({"ts_ns": at, "host": "node-a", "rank": rank, "pid": 100 + rank,
                                     "run_ns": 10 * S + int(k * run * seconds * S),
                                     "wait_ns": 5 * S + int(k * wait * seconds * S), "slices": 1000 + k,
                                     "threads": 4, "load1": 7.5, "cpus": 2}))
    (folder / "node-a.sched.jsonl").write_text("\n".join(lines) + "\n")


def _load(evidence: Path) -> Store:
    """The evidence as the loader reads it (with the step records every incident's evidence holds)."""
    steps = evidence / "steps" / "rank-0.jsonl"
    steps.parent.mkdir(parents=True, exist_ok=True)
    steps.write_text("".join(json.dumps({"rank": 0, "step": k, "start_ns": 10**18 + k * 50_000_000,
                                         "end_ns": 10**18 + (k + 1) * 50_000_000}) + "\n" for k in range(20)))
    return load_path(evidence, LoadOptions(cache_dir=None, workers=1))


def _findings(evidence: Path) -> list[Finding]:
    return analyze_cpu_contention(Analysis(_load(evidence)))


def test_ranks_waiting_for_a_cpu_more_than_in_the_baseline_are_named(tmp_path: Path) -> None:
    # GIVEN an incident's evidence: ranks 0 and 1 waited 31% and 35% of the window for a CPU, rank 2 4%; in the
    # healthy baseline all three waited about 4%
    _window(tmp_path / "baseline" / "sched", {0: (0.04, 0.6), 1: (0.05, 0.6), 2: (0.04, 0.6)})
    _window(tmp_path / "sched", {0: (0.31, 0.45), 1: (0.35, 0.44), 2: (0.04, 0.6)}, t0=2 * 10**18)
    # WHEN it is analyzed
    (found,) = _findings(tmp_path)
    # THEN one warning for the host names ranks 0 and 1, their shares then and in the baseline, and what to do
    assert found.hosts == ("node-a",) and found.ranks == (0, 1) and found.severity.label == "warning"
    assert "waited for a CPU 33% of the incident's window (4% in the healthy baseline)" in found.title
    assert [r["baseline_wait_share"] for r in found.evidence["ranks"]] == [0.04, 0.05]
    assert "taskset" in found.recommendation


def test_no_finding_when_the_wait_is_as_in_the_baseline_or_small(tmp_path: Path) -> None:
    # GIVEN a machine that was as busy in the baseline (30% wait) as in the incident (36%): not a change
    busy = tmp_path / "busy"
    _window(busy / "baseline" / "sched", {0: (0.30, 0.5), 1: (0.30, 0.5)})
    _window(busy / "sched", {0: (0.36, 0.5), 1: (0.36, 0.5)}, t0=2 * 10**18)
    # AND an incident without a baseline whose ranks waited 20% (below what counts without one)
    alone = tmp_path / "alone"
    _window(alone / "sched", {0: (0.20, 0.5), 1: (0.20, 0.5)})
    # THEN neither is a finding; without a baseline, 40% is
    assert _findings(busy) == [] and _findings(alone) == []
    _window(alone / "sched", {0: (0.40, 0.5), 1: (0.20, 0.5)})
    (found,) = _findings(alone)
    assert found.ranks == (0,) and "no healthy baseline to compare" in found.title


def test_a_bad_line_is_a_note_and_the_rest_is_read(tmp_path: Path) -> None:
    # GIVEN a scheduler file with a line that is not a record
    _window(tmp_path / "sched", {0: (0.5, 0.4)})
    path = tmp_path / "sched" / "node-a.sched.jsonl"
    path.write_text(path.read_text() + '{"ts_ns": "x", "rank": 0, "pid": 1, "run_ns": 1, "wait_ns": 1}\n')
    store = _load(tmp_path)
    # THEN the records are loaded and the bad line is named in a note
    assert len(store["cpu_sched"]) == 2
    assert any("not scheduler records" in n.message and "line 3" in n.message for n in store.notes)


def test_this_process_has_scheduler_accounting() -> None:
    # GIVEN this very process, WHEN its threads' schedstat is summed, THEN it ran and has at least one thread
    read = read_process(os.getpid())
    assert read is not None and read[0] > 0 and read[3] >= 1
    record = snapshot_record("node-a", 0, os.getpid(), 1)
    assert record is not None and record["cpus"] >= 1 and record["run_ns"] >= read[0]
    assert read_process(2**22 + 7) is None  # no such pid
