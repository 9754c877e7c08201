"""Round three: outputs never delete what perftracker did not write. The probes: `analyze -o DIR` where DIR is a
user's folder holding `tables/budget.csv` (exit 0, the file gone), and `-o LINK` to a foreign folder (its
`tables/` contents and an old timeline deleted)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import perftracker
from perftracker.cli import app
from perftracker.containment import OUTPUT_MARK
from perftracker.errors import OutputError
from perftracker.results import Run

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "gloo-4rank-stall-rank2"


@pytest.fixture(scope="module")
def run() -> Run:
    return perftracker.analyze(SAMPLE, cache=False)


def _users_folder(root: Path) -> Path:
    folder = root / "mine"
    (folder / "tables").mkdir(parents=True)
    (folder / "tables" / "budget.csv").write_text("q1,100\n")
    (folder / "timeline.json.gz").write_bytes(b"my own")
    return folder


def test_a_users_folder_is_refused_naming_what_is_there(tmp_path: Path) -> None:
    # GIVEN a user's own folder (no perftracker mark) holding tables/budget.csv and a timeline.json.gz
    folder = _users_folder(tmp_path)
    # WHEN analyzed into THEN exit 2 naming what is there, and every file is as it was
    result = CliRunner().invoke(app, ["analyze", str(SAMPLE), "-o", str(folder), "-q", "--no-cache"])
    assert result.exit_code == 2, result.output
    assert "not a perftracker output folder" in " ".join(result.output.split())
    assert (folder / "tables" / "budget.csv").read_text() == "q1,100\n"
    assert (folder / "timeline.json.gz").read_bytes() == b"my own"
    assert not (folder / OUTPUT_MARK).exists() and not (folder / "findings.json").exists()


def test_a_symlinked_output_folder_is_refused(run: Run, tmp_path: Path) -> None:
    # GIVEN -o a link to a foreign folder (empty or not)
    target = _users_folder(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(target)
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "link2").symlink_to(empty)
    # WHEN written THEN refused (OutputError, exit 2 on the command line); the target untouched
    for out in (link, tmp_path / "link2"):
        with pytest.raises(OutputError, match="symbolic link"):
            run.write(out)
    assert sorted(p.name for p in target.rglob("*")) == ["budget.csv", "tables", "timeline.json.gz"]
    assert list(empty.iterdir()) == []


def test_inside_a_marked_folder_only_what_its_manifest_lists_is_replaced(run: Run, tmp_path: Path) -> None:
    # GIVEN a perftracker output folder, then a user's file dropped into its tables/
    out = tmp_path / "out"
    run.write(out)
    manifest = json.loads((out / OUTPUT_MARK).read_text())
    assert "findings.json" in manifest["files"] and "tables/steps.parquet" in manifest["files"]
    assert manifest["made_from"] == run.input
    (out / "tables" / "budget.csv").write_text("q1,100\n")
    # WHEN written again THEN refused before anything is written, the file named and kept
    with pytest.raises(OutputError, match="budget.csv"):
        run.write(out)
    assert (out / "tables" / "budget.csv").read_text() == "q1,100\n"
    # AND once it is moved away, the folder is written again (its own files replaced)
    (out / "tables" / "budget.csv").unlink()
    run.write(out)


def test_a_file_the_manifest_does_not_list_is_never_replaced(run: Run, tmp_path: Path) -> None:
    # GIVEN an output folder whose manifest lists no timeline, and a timeline.json.gz a user put there
    out = tmp_path / "out"
    run.write(out)
    (out / "timeline.json.gz").write_bytes(b"the user's")
    # WHEN written again (this run has no timeline: an earlier run's would be removed) THEN it is kept
    with pytest.raises(OutputError, match="timeline.json.gz"):
        run.write(out)
    assert (out / "timeline.json.gz").read_bytes() == b"the user's"


def test_planted_links_in_an_unmarked_folder_are_refused_their_targets_untouched(tmp_path: Path) -> None:
    # GIVEN an unmarked folder holding `tables` -> a foreign folder
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "tables").symlink_to(foreign)
    # WHEN analyzed into THEN exit 2, the foreign folder as it was
    result = CliRunner().invoke(app, ["analyze", str(SAMPLE), "-o", str(out), "-q", "--no-cache"])
    assert result.exit_code == 2, result.output
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"]
    shutil.rmtree(out)


def test_a_saved_folder_whose_mark_and_findings_disagree_is_said(run: Run, tmp_path: Path) -> None:
    # GIVEN an output folder whose mark says its last analysis was of another input than its findings.json
    out = tmp_path / "out"
    run.write(out)
    mark = json.loads((out / OUTPUT_MARK).read_text())
    (out / OUTPUT_MARK).write_text(json.dumps({**mark, "made_from": "/runs/another-job"}))
    # WHEN read as a saved analysis (as `diff` and `report` read it) THEN a warning names both
    notes = [n.message for n in perftracker.read(out).notes]
    assert any("/runs/another-job" in m and "two runs" in m for m in notes), notes
    # AND a folder whose mark agrees gets no such note
    (out / OUTPUT_MARK).write_text(json.dumps(mark))
    assert not any("two runs" in n.message for n in perftracker.read(out).notes)
