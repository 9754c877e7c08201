"""`--follow-links` on every reader: postmortem, timeline, diff and report (analyze's own is in
tests/hostile/test_input_containment.py), and the API functions behind them.

GIVEN a copy of the real gloo sample whose rank-3 trace lies outside the run directory, linked from
`traces/` (the probe's `../../outside/...` link), or an output folder whose findings.json / a table links
outside it; WHEN each command reads it with and without `--follow-links`; THEN by default the link is not
followed and a note names it; with the flag the linked file is read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker import api
from perftracker.cli import app

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
LINK = "traces/rank-3.pt.trace.json.gz"


def _linked_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    (tmp_path / "outside").mkdir()
    (run / LINK).rename(tmp_path / "outside" / "rank-3.pt.trace.json.gz")
    (run / LINK).symlink_to(Path("../../outside/rank-3.pt.trace.json.gz"))
    return run


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _linked_run(tmp_path_factory.mktemp("links"))


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def _ranks(findings_json: Path) -> int:
    """The ranks whose traces were read (those the collectives were matched across)."""
    findings = json.loads(findings_json.read_text(encoding="utf-8"))["findings"]
    return len(next(f for f in findings if f["title"].startswith("Matched "))["ranks"])


@pytest.mark.parametrize("follow", [False, True])
def test_postmortem(linked: Path, tmp_path: Path, follow: bool) -> None:
    # WHEN postmortem reads the run with the rank-3 trace linked from outside it
    code, output = _invoke("postmortem", str(linked), "-o", str(tmp_path / "out"), *(["--follow-links"] * follow))
    # THEN it runs; by default rank 3's trace is left out with a note naming the link, with the flag it is read
    assert code == 0, output
    text = (tmp_path / "out" / "findings.json").read_text(encoding="utf-8")
    assert ("rank-3.pt.trace.json.gz: a symlink leading outside the input folder" in text) is not follow
    assert _ranks(tmp_path / "out" / "findings.json") == (4 if follow else 3)


@pytest.mark.parametrize("follow", [False, True])
def test_timeline(linked: Path, tmp_path: Path, follow: bool) -> None:
    # WHEN timeline merges the run
    code, output = _invoke("timeline", str(linked), "-o", str(tmp_path / "t.json.gz"), "--no-cache",
                           *(["--follow-links"] * follow))
    # THEN 3 ranks and a note naming the link by default; all 4 ranks with the flag, no such note
    assert code == 0, output
    assert f"ranks {4 if follow else 3}," in output
    assert ("rank-3.pt.trace.json.gz: a symlink leading outside the input folder" in " ".join(output.split())) \
        is not follow


@pytest.mark.parametrize("follow", [False, True])
def test_diff_of_raw_inputs(linked: Path, tmp_path: Path, follow: bool) -> None:
    # WHEN the linked run is diffed against the sample itself, written to -o
    out = tmp_path / "cmp"
    code, output = _invoke("diff", str(SAMPLE), str(linked), "-o", str(out), "--no-cache",
                           "--allow-different-jobs", *(["--follow-links"] * follow))
    # THEN the new side's analysis reads 3 ranks and names the link by default, 4 ranks with the flag
    assert code in (0, 3), output
    side = out / "new" / "findings.json"
    assert _ranks(side) == (4 if follow else 3)
    assert ("a symlink leading outside the input folder" in side.read_text(encoding="utf-8")) is not follow


def test_api_timeline_and_diff_take_follow_links(linked: Path) -> None:
    # WHEN the API functions behind the commands are given follow_links
    # THEN they read the linked trace only then
    assert len(api.timeline(linked, cache=False, workers=1).ranks) == 3
    assert len(api.timeline(linked, cache=False, workers=1, follow_links=True).ranks) == 4


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "out"
    api.analyze(SAMPLE, cache=False, workers=1).write(out)
    (out / ".perftracker-output").unlink(missing_ok=True)
    return out


def _moved_out(saved: Path, tmp_path: Path, name: str) -> Path:
    """A copy of the output folder whose `name` is moved outside it and linked back."""
    out = Path(shutil.copytree(saved, tmp_path / "out"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (out / name).rename(outside / Path(name).name)
    (out / name).symlink_to(outside / Path(name).name)
    return out


@pytest.mark.parametrize("follow", [False, True])
def test_report_with_a_table_linked_from_outside(saved: Path, tmp_path: Path, follow: bool) -> None:
    # GIVEN an output folder whose steps table links to a file outside it
    out = _moved_out(saved, tmp_path, "tables/steps.parquet")
    # WHEN the report is redrawn
    code, output = _invoke("report", str(out), *(["--follow-links"] * follow))
    # THEN it is written; by default the page names the link and leaves the table out; with the flag, reads it
    assert code == 0, output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert ("tables/steps.parquet: a symlink leading outside the output folder" in page) is not follow
    assert api.read(out, follow_links=follow).tables["steps"].empty is not follow


@pytest.mark.parametrize("follow", [False, True])
def test_report_and_diff_with_findings_json_linked_from_outside(saved: Path, tmp_path: Path, follow: bool) -> None:
    # GIVEN an output folder whose findings.json links to a file outside it
    out = _moved_out(saved, tmp_path, "findings.json")
    # WHEN report and diff read it
    code, output = _invoke("report", str(out), *(["--follow-links"] * follow))
    diff_code, diff_output = _invoke("diff", str(out), str(out), *(["--follow-links"] * follow))
    # THEN by default both refuse it (exit 2) naming the link and the flag; with the flag both read it
    if follow:
        assert (code, diff_code) == (0, 0), output + diff_output
    else:
        for c, text in ((code, output), (diff_code, diff_output)):
            flat = " ".join(text.split())
            assert c == 2 and "a symlink leading outside its folder" in flat and "--follow-links" in flat, text
