"""Helpers of the watcher's real-job tests: slow one rank from outside with a SIGSTOP duty cycle, and wait for
the watcher's incidents."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sample_job_runner import duty_cycle

from perftracker.live.watch.incidents import BASELINE_FILE

__all__ = ["duty_cycle", "incidents", "named_by", "step_of", "wait_baseline", "wait_incident"]


def incidents(run: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run / "incidents").glob("*/incident.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out.append({**record, "folder": str(path.parent)})
    return out


def wait_incident(run: Path, kind: str, timeout: float, done: bool = True) -> dict[str, Any]:
    """The first incident of `kind` (once analyzed, with `done`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in incidents(run):
            if record["kind"] == kind and (not done or record["state"] in ("done", "interrupted")):
                return record
        time.sleep(0.5)
    raise TimeoutError(f"no {kind} incident in {run} within {timeout:.0f}s: {incidents(run)}")


def wait_baseline(run: Path, timeout: float) -> None:
    """Until the watcher's healthy baseline window is recorded (its `baseline.json`, written last)."""
    deadline = time.monotonic() + timeout
    while not any((run / "incidents").glob(f"baseline-*/{BASELINE_FILE}")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no baseline recorded in {run} within {timeout:.0f}s")
        time.sleep(0.5)


def step_of(run: Path, rank: int, at_ns: int) -> int:
    """The step `rank` was at when wall time `at_ns` came (from the job's own step file)."""
    step = -1
    for line in (run / "steps" / f"rank-{rank}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["start_ns"] <= at_ns:
            step = rec["step"]
    return step


def named_by(findings: list[dict[str, Any]], analyzer: str) -> list[list[int]]:
    """The ranks each warning or critical finding of `analyzer` names, whether it stands in findings.json or was
    folded into the `waited_rank` finding about the same rank (one cause, one finding: its evidence's `folded`)."""
    out = [f["ranks"] for f in findings if f["analyzer"] == analyzer and f["severity"] != "info"]
    for f in findings:
        if f["analyzer"] == "waited_rank":
            out += [f["ranks"] for folded in f["evidence"].get("folded", []) if folded["analyzer"] == analyzer]
    return out
