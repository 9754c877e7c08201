"""`perftracker diff` names what changed between two runs, and nothing between two runs of the same job.

Promise checked on real recorded runs (tests/fixtures/accuracy, scripts/record_accuracy_runs.py): the
same 4-rank job run four times (`clean-repro-a..d`, whose step time varies by up to 24% from run to run
on this machine) gives no warning in any of the 12 ordered pairs; the same job with rank 2 doing extra
forward work (`inproc-rank2-x5-repro`) is named as rank 2, with the op that holds the extra time, from
each clean run. A synthetic pair checks the regression path (an op 30% slower on every rank) and the CLI
checks outputs, the exit code of --fail-on-regression and escaping.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from api_helpers import side_of

from perftracker.analyzers.compare.diff import compare_runs
from perftracker.analyzers.compare.side import RunSide
from perftracker.analyzers.findings import Severity
from perftracker.output_dir import replace_tables
from perftracker.reports import json_report

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "fixtures" / "accuracy"
SAME_JOB = ["clean-repro-a", "clean-repro-b", "clean-repro-c", "clean-repro-d"]
EXTRA_WORK = "inproc-rank2-x5-repro"


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunSide]:
    """Each real run analyzed once (its analysis output then read back, as `diff` reads a saved one)."""
    out = tmp_path_factory.mktemp("sides")
    result = {}
    for name in [*SAME_JOB, EXTRA_WORK]:
        side_of(CORPUS / name, name, out / name, cache=False, workers=1)
        result[name] = side_of(out / name, name, out / "unused", cache=False, workers=1)
    return result


def test_the_same_job_twice_shows_no_change_in_any_pair(sides: dict[str, RunSide]) -> None:
    # GIVEN the four real runs of one job WHEN every ordered pair is compared
    loud = {}
    for a, b in itertools.permutations(SAME_JOB, 2):
        found = [f.title for f in compare_runs(sides[a], sides[b]).findings if f.severity >= Severity.WARNING]
        if found:
            loud[f"{a}->{b}"] = found
    # THEN no pair shows a warning (step times of these runs differ by up to 24%)
    assert loud == {}


def test_one_rank_doing_extra_work_is_named_with_its_op(sides: dict[str, RunSide]) -> None:
    for base in SAME_JOB:
        # GIVEN a clean run and the same job with rank 2 doing extra forward work WHEN compared
        diff = compare_runs(sides[base], sides[EXTRA_WORK])
        loud = [f for f in diff.findings if f.severity >= Severity.WARNING]
        # THEN one warning names rank 2 only, with the op holding the extra time among its ops
        assert [f.ranks for f in loud] == [(2,)], (base, [f.title for f in loud])
        assert "extra_work" in [o["name"] for o in loud[0].evidence["ops"]]
        assert loud[0].cost.seconds_per_step > 0.005


def _side(label: str, step_ms: float, mm_ms: float, rng: np.random.Generator) -> RunSide:
    steps = pd.DataFrame([{"rank": r, "window": 0, "step": s, "start_ns": 0,
                           "dur_ns": int((step_ms + rng.normal(0, 1)) * 1e6), "source": "profiler"}
                          for r in range(4) for s in range(30)])
    ops = pd.DataFrame([{"rank": r, "kind": k, "name": n, "total_ns": int(ms * 30 * 1e6), "count": 30, "steps": 30}
                        for r in range(4) for k, n, ms in (("compute", "aten::mm", mm_ms + rng.normal(0, 0.2)),
                                                           ("compute", "aten::add", 20.0 + rng.normal(0, 0.2)),
                                                           ("compute", "<b>odd</b>", 10.0 + rng.normal(0, 0.2)),
                                                           ("comm", "ncclDevKernel_AllReduce", 30.0))])
    settings = pd.DataFrame([{"key": "NCCL_ALGO", "value": "Ring" if label == "base" else "Tree", "ranks": 4,
                              "source": "env"}])
    return RunSide(label, steps, ops, settings, ())


def test_an_op_slower_on_every_rank_is_a_regression_with_that_op(tmp_path: Path) -> None:
    # GIVEN 30 steps of 100 ms on 4 ranks, then 130 ms with aten::mm 40 -> 70 ms on every rank, and NCCL_ALGO changed
    rng = np.random.default_rng(0)
    base, new = _side("base", 100.0, 40.0, rng), _side("new", 130.0, 70.0, rng)
    diff = compare_runs(base, new)
    # THEN the step time is a critical regression, the op change a warning naming aten::mm, the setting an info
    by_key = {f.key: f for f in diff.findings}
    assert by_key["diff:steps"].severity == Severity.CRITICAL and diff.regression_significant
    assert by_key["diff:ops"].severity == Severity.WARNING
    assert by_key["diff:ops"].evidence["ops"][0]["name"] == "aten::mm"
    assert by_key["diff:settings"].severity == Severity.INFO and "NCCL_ALGO" in by_key["diff:settings"].title
    # AND the context splits each rank's op time by kind: 30 ms of all-reduce, about 70 ms of compute per step
    comm = by_key["diff:comm"].evidence
    assert comm["base_comm_ms"] == 30.0 and 65 < comm["base_compute_ms"] < 75
    # WHEN the CLI compares the two as saved analysis outputs with --fail-on-regression 10
    for side in (base, new):
        folder = tmp_path / side.label
        folder.mkdir()
        replace_tables({"steps": side.steps, "op_totals": side.op_totals, "settings": side.settings}, folder / "tables")
        json_report.write(folder / "findings.json", json_report.build([], [], side.label, {}))
    (tmp_path / "base" / "report.html").write_text("the base run's report")  # the new side kept none
    proc = subprocess.run([sys.executable, "-m", "perftracker", "diff", str(tmp_path / "base"), str(tmp_path / "new"),
                           "-o", str(tmp_path / "out"), "--fail-on-regression", "10"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    # THEN it exits 3, writes diff.json in the findings schema and diff.html with op names escaped
    assert proc.returncode == 3, proc.stdout + proc.stderr
    document = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert {f["key"] if "key" in f else f["id"] for f in document["findings"]} and document["summary"]["diff"]["scale"]
    page = (tmp_path / "out" / "diff.html").read_text()
    assert "aten::mm" in page and "<b>odd</b>" not in page
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name != ".perftracker-output") == ["diff.html",
                                                                                                   "diff.json"]
    # AND the page links the side whose report was kept, relative to itself, and no link that would not work
    assert 'href="../base/report.html">base</a>' in page and ">new</a>" not in page
