"""`perftracker timeline` writes one merged trace of all ranks on one clock, with the findings marked.

Promise checked: the file reads back as Chrome trace-event JSON (what Perfetto UI opens) with one process
per rank named `rank N (host)`, grouped by host; each rank's events are shifted by its estimated clock
offset, so collectives that end together on skewed clocks end together in the file; the straggler's
late arrivals are instants on its own track; --ranks / --steps / --max-events select what is kept and
the metadata says what was left out. Inputs: a real recorded 4-rank run with rank 2 slowed, and the
synthetic 3-host skewed-clock job of tests/analyzers/stragglers/test_multihost_clocks.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from synth import SynthSpec, generate

REPO = Path(__file__).resolve().parents[3]
SLOWED = REPO / "tests" / "fixtures" / "accuracy" / "inproc-rank2-x5-16"
HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
SKEW_US = {0: 0.0, 1: 0.0, 2: 5000.0, 3: 5000.0}


def _timeline(path: Path, out: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "perftracker", "timeline", str(path), "-o", str(out), "--no-cache",
                           *extra], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(gzip.decompress(out.read_bytes()) if out.suffix == ".gz" else out.read_bytes())
    return data


def test_real_slowed_run_becomes_one_trace_with_the_stragglers_late_arrivals(tmp_path: Path) -> None:
    # GIVEN a real 4-rank run whose rank 2 does 5x the forward work WHEN merged
    trace = _timeline(SLOWED, tmp_path / "t.json.gz")
    events = trace["traceEvents"]
    # THEN there is one named process per rank, each with its events
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r: f"rank {r} (vm)" for r in range(4)}
    assert all(any(e["ph"] == "X" and e["pid"] == r for e in events) for r in range(4))
    # AND the straggler's late arrivals are marked on rank 2's track only
    marks = [e for e in events if e["ph"] == "i" and e["name"].startswith("late ")]
    assert len(marks) >= 8 and {e["pid"] for e in marks} == {2}


def test_skewed_clocks_are_aligned_and_selection_is_said(tmp_path: Path) -> None:
    # GIVEN 4 ranks on 2 hosts whose clocks differ by 5 ms
    run = tmp_path / "run"
    generate(SynthSpec(ranks=4, steps=6, kernels_per_step=6, skew_us=SKEW_US, seed=5), run / "traces",
             truth_path=tmp_path / "truth.json")
    for rank, host in HOSTS.items():
        trace = next((run / "traces").glob(f"rank-{rank}.*"))
        trace.rename(run / "traces" / f"{host}_{100 + rank}.1700000000000.pt.trace.json{trace.suffix}")
    # WHEN merged
    trace = _timeline(run, tmp_path / "t.json")
    events = trace["traceEvents"]
    # THEN the offsets are in the metadata (node-b about 5 ms from node-a) and processes are grouped by host
    offsets = {int(k): v for k, v in trace["metadata"]["clock_offsets_ns"].items()}
    assert abs((offsets[2] - offsets[0]) - 5_000_000) < 10_000
    order = sorted((e["args"]["sort_index"], e["pid"]) for e in events if e["name"] == "process_sort_index")
    assert [pid for _, pid in order] == [0, 1, 2, 3]
    # AND each all-reduce kernel ends at about the same time on every rank in the merged file
    comm = [e for e in events if e["ph"] == "X" and e.get("cat") == "comm"]
    ends: dict[int, list[float]] = {}
    for e in comm:
        ends.setdefault(e["pid"], []).append(e["ts"] + e["dur"])
    spread = np.ptp(np.array([sorted(v) for _, v in sorted(ends.items())]), axis=0)
    assert len(comm) >= 4 * 6 and float(np.median(spread)) < 100.0  # microseconds
    # WHEN only ranks 0 and 3 and two of the steps are asked for
    first, second = sorted({e["args"]["step"] for e in events if e["ph"] == "X" and e["args"]["step"] >= 0})[1:3]
    part = _timeline(run, tmp_path / "p.json", "--ranks", "0,3", "--steps", f"{first}-{second}")
    pids = {e["pid"] for e in part["traceEvents"] if e["ph"] == "X"}
    steps = {e["args"]["step"] for e in part["traceEvents"] if e["ph"] == "X"}
    # THEN only those are in the file, and the metadata says which ranks of how many
    assert pids == {0, 3} and steps == {first, second} and part["metadata"]["ranks"] == [0, 3]
    assert "2 of 4 ranks" in part["metadata"]["left_out"]
