"""Outputs only where asked: a link planted in -o is never written through, two commands never write one
folder at once (the second is told at once), and an earlier run's files are not shown as this run's.
The probe's cases rebuilt: a `tables` symlink in an existing -o (root wrote 38 parquet files into a
foreign folder), two analyses into one -o, a stale timeline linked from the new report."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.containment import OUTPUT_MARK
from perftracker.errors import OutputError
from perftracker.output_dir import claimed, replace_tables

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(shutil.copytree(SAMPLE, tmp_path_factory.mktemp("out-run") / "run"))


def test_a_planted_tables_link_is_replaced_never_written_through(run: Path, tmp_path: Path) -> None:
    # GIVEN an -o holding `tables` -> a foreign folder and `findings.json` -> a foreign file
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "tables").symlink_to(foreign)
    (out / "findings.json").symlink_to(foreign / "keep.txt")
    # WHEN analyzed into it
    result = CliRunner().invoke(app, ["analyze", str(run), "-o", str(out), "-q"])
    # THEN the foreign folder and file are as they were; the output holds real files
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"] and (foreign / "keep.txt").read_text() == "mine"
    assert not (out / "tables").is_symlink() and any((out / "tables").glob("*.parquet"))
    assert not (out / "findings.json").is_symlink()


def test_a_second_writer_is_refused_at_once_with_a_clear_message(run: Path, tmp_path: Path) -> None:
    # GIVEN an output folder another perftracker command holds (its lock taken through another open file,
    # as another process takes it)
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / OUTPUT_MARK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        # WHEN an analysis is asked to write there THEN it stops at once, exit 2, saying why
        result = CliRunner().invoke(app, ["analyze", str(run), "-o", str(out), "-q"])
        assert result.exit_code == 2, result.output
        assert "another perftracker command is writing into this folder" in " ".join(result.output.split())
        assert not (out / "findings.json").exists()
    finally:
        os.close(fd)
    # AND once released, it writes
    assert CliRunner().invoke(app, ["analyze", str(run), "-o", str(out), "-q"]).exit_code == 0


def test_an_earlier_runs_timeline_and_tables_are_not_shown_as_this_runs(run: Path, tmp_path: Path) -> None:
    # GIVEN an output folder from a run with --timeline, and a table of a view this version no longer writes
    # (the earlier version listed it in the folder's manifest, like every file it wrote)
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["analyze", str(run), "-o", str(out), "--timeline", "-q"]).exit_code == 0
    assert (out / "timeline.json.gz").is_file()
    (out / "tables" / "old_view.parquet").write_bytes(b"PAR1 old")
    mark = json.loads((out / OUTPUT_MARK).read_text())
    (out / OUTPUT_MARK).write_text(json.dumps({**mark, "files": [*mark["files"], "tables/old_view.parquet"]}))
    # WHEN analyzed again without --timeline
    assert CliRunner().invoke(app, ["analyze", str(run), "-o", str(out), "-q"]).exit_code == 0
    # THEN neither the old timeline nor the old table is left, and the report links no timeline file
    assert not (out / "timeline.json.gz").exists() and not (out / "tables" / "old_view.parquet").exists()
    assert 'href="timeline.json.gz"' not in (out / "report.html").read_text(encoding="utf-8")


def test_replace_tables_leaves_nothing_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an earlier run's tables, and a disk that fills on the second table
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "a.parquet").write_bytes(b"old")
    real = pd.DataFrame.to_parquet
    calls: list[int] = []

    def filling(self: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", filling)
    # WHEN the tables are replaced THEN the error comes out, and the earlier tables are whole, nothing else left
    with pytest.raises(OSError):
        replace_tables({"a": pd.DataFrame({"x": [1]}), "b": pd.DataFrame({"x": [1]})}, tmp_path / "tables")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]
    assert (tmp_path / "tables" / "a.parquet").read_bytes() == b"old"


def test_a_planted_diff_side_link_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with claimed(out):
        pass
    (tmp_path / "elsewhere").mkdir()
    (out / "base").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputError, match="symlink inside a perftracker output folder"), claimed(out / "base"):
        pass


def test_a_command_that_fails_before_writing_leaves_no_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "nothing-here"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
