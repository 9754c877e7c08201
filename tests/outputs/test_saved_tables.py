"""tables/ read back column-checked: `perftracker report OUT`, `diff` of saved outputs and `api.read` on an
output folder whose tables were edited or replaced.

GIVEN an analysis output of the real gloo sample with one table edited (wrong columns, wrong dtypes, extra
columns, not Parquet, a row bomb, past the size cap, a FIFO, nested columns); WHEN report, diff and read
take it; THEN no exit 70 and no traceback: the report is written with a note naming the table and why,
the diff compares (the table's part empty), and `Run.notes` says it. Edited tables are synthetic by
construction (written by the test); the output they sit in is the real sample's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from perftracker import api, outputs
from perftracker.cli import app

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "out"
    api.analyze(SAMPLE, cache=False, workers=1).write(out)
    return out


def _frame(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path)


def _drop_column(path: Path) -> None:
    _frame(path).drop(columns=["total_ns"]).to_parquet(path)


def _wrong_dtype(path: Path) -> None:
    frame = _frame(path)
    frame["ranks"] = frame["ranks"].astype(str) + "x"
    frame.to_parquet(path)


def _extra_column(path: Path) -> None:
    frame = _frame(path)
    frame["<script>"] = "x"
    frame.to_parquet(path)


def _not_parquet(path: Path) -> None:
    path.write_bytes(b"PAR1 not really a parquet file")


def _row_bomb(path: Path) -> None:  # 21M rows of zeros: ~0.1 MB on disk
    pd.DataFrame({"dur_ns": np.zeros(outputs.MAX_TABLE_ROWS + 1_000_000, dtype=np.int8)}).to_parquet(path)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _nested(path: Path) -> None:
    pd.DataFrame({"rank": [[1, 2]], "kind": [{"a": 1}]}).to_parquet(path)


EDITS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "wrong columns": ("op_totals", _drop_column, "columns total_ns are missing"),
    "wrong dtype": ("settings", _wrong_dtype, "column 'ranks' holds"),
    "extra column": ("steps", _extra_column, "columns perftracker does not write (<script>) were dropped"),
    "not parquet": ("kernels", _not_parquet, "not a Parquet file perftracker can read"),
    "row bomb": ("steps", _row_bomb, "rows, more than the"),
    "fifo": ("ops", _fifo, "not a regular file"),
    "nested": ("op_totals", _nested, "not plain numbers or text"),
}


def _edited(saved: Path, tmp_path: Path, name: str) -> tuple[Path, str]:
    table, edit, said = EDITS[name]
    out = Path(shutil.copytree(saved, tmp_path / "out"))
    (out / ".perftracker-output").unlink(missing_ok=True)
    edit(out / "tables" / f"{table}.parquet")
    return out, said


@pytest.mark.parametrize("name", sorted(EDITS))
def test_report_diff_and_read_of_an_edited_table(saved: Path, tmp_path: Path, name: str) -> None:
    out, said = _edited(saved, tmp_path, name)
    table = EDITS[name][0]
    # WHEN the report is redrawn, the folder diffed against the untouched one, and read by the API
    report = CliRunner().invoke(app, ["report", str(out)])
    diff = CliRunner().invoke(app, ["diff", str(saved), str(out), "-q"])
    run = api.read(out)
    # THEN the page is written with a note naming the table and why; diff answers; read says it too
    assert report.exit_code == 0 and report.exception is None or isinstance(report.exception, SystemExit), \
        report.output
    page = " ".join((out / "report.html").read_text(encoding="utf-8").split())
    assert f"tables/{table}.parquet" in page and said.replace("'", "&#39;").replace("<", "&lt;")\
        .replace(">", "&gt;") in page, name
    assert diff.exit_code in (0, 3) and "Traceback" not in diff.output, diff.output
    notes = [n for n in run.notes if n.source == f"tables/{table}.parquet"]
    assert notes and said in notes[0].message
    if name != "extra column":
        assert run.tables[table].empty
    else:
        assert list(run.tables[table].columns) == list(outputs.VIEW_SCHEMAS["steps"])


def test_a_table_past_the_size_cap_is_left_out_unread(saved: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the cap lowered below the size of the (untouched) largest table
    out = Path(shutil.copytree(saved, tmp_path / "out"))
    largest = max((out / "tables").glob("*.parquet"), key=lambda p: p.stat().st_size)
    size = largest.stat().st_size
    monkeypatch.setattr(outputs, "MAX_TABLE_BYTES", size - 1)
    # WHEN read
    run = api.read(out)
    # THEN that table alone is left out, said with its size; the others are read
    assert run.tables[largest.stem].empty and not run.tables["steps"].empty
    said = [n for n in run.notes if n.source.startswith("tables/")]
    assert len(said) == 1 and said[0].source == f"tables/{largest.name}" and f"({size:,})" in said[0].message


def test_untouched_tables_are_read_without_a_note(saved: Path) -> None:
    # GIVEN the output as written WHEN read THEN no table note, and every declared table matches its schema
    run = api.read(saved)
    assert not [n for n in run.notes if n.source.startswith("tables/")]
    for name, columns in outputs.VIEW_SCHEMAS.items():
        assert list(run.tables[name].columns) == list(columns), name


def test_the_empty_views_of_a_run_without_traces_are_read_without_a_note(tmp_path: Path) -> None:
    # GIVEN the output of a bundled run with NCCL logs and counters but no traces: its op and step views are
    # empty, and Parquet stores their columns with no type
    out = tmp_path / "out"
    api.analyze(Path(__file__).resolve().parents[2] / "sample_traces" / "nccl-roce-2node-misconfig",
                cache=False, workers=1).write(out)
    # WHEN it is read back THEN no table is left out for it (the report re-rendered has no "Inputs" section)
    run = api.read(out)
    assert not [n for n in run.notes if n.source.startswith("tables/")]
