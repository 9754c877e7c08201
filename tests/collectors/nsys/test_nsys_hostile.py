"""Odd and hostile Nsight Systems exports: each is a clear note naming the file, never a traceback, and the
file is never written. Real exports (tests/fixtures/nsys) cut or capped; the others are SYNTHETIC, built per
the documented schema (tests/nsys_fixtures.py) to hold what no public export holds."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from api_helpers import analyzed
from nsys_fixtures import MFU, SAXPY, real_export, synthetic_export

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.errors import InputError

KERNELS = [(1_000_000 + i * 100_000, 1_050_000 + i * 100_000, "gemm_kernel") for i in range(6)]


def _notes(store: object, level: str) -> list[str]:
    return [f"{n.source}: {n.message}" for n in store.notes if n.level == level]  # type: ignore[attr-defined]


def test_truncated_export_is_a_note_and_the_good_one_is_analyzed(tmp_path: Path) -> None:
    # GIVEN a real export cut to 40% of its bytes beside an intact one
    good = real_export(SAXPY, tmp_path / "run", "rank_0.sqlite")
    data = real_export(MFU, tmp_path / "src").read_bytes()
    (tmp_path / "run" / "rank_1.sqlite").write_bytes(data[: len(data) * 2 // 5])
    # WHEN the folder is loaded
    store = load_path(tmp_path / "run", LoadOptions())
    # THEN the intact one is rank 0 and the cut one an error naming it and saying what to do
    assert sorted(store.ranks["rank"]) == [0] and store.ranks["file"].iloc[0] == str(good)
    errors = _notes(store, "error")
    assert len(errors) == 1 and "rank_1.sqlite" in errors[0] and "nsys export" in errors[0], errors


@pytest.mark.parametrize("content", [b"SQLite format 3\x00" + b"\x01" * 5000, b""])
def test_garbage_with_sqlite_name_is_refused_clearly(tmp_path: Path, content: bytes) -> None:
    # GIVEN a file named .sqlite that is a damaged header, or empty
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x.sqlite").write_bytes(content)
    # WHEN it is analyzed alone THEN the error names it (exit 2 at the command), no traceback
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "run", LoadOptions())
    assert content == b"" or "x.sqlite" in str(err.value.message)


def test_sqlite_that_is_not_an_export_and_a_view_that_would_run_forever(tmp_path: Path) -> None:
    # GIVEN an SQLite file with StringIds and a VIEW named like the kernel table (a recursive query that never
    # ends), beside a real export
    real_export(SAXPY, tmp_path / "run", "rank_0.sqlite")
    path = tmp_path / "run" / "v.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    conn.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
                 "SELECT x + 1 FROM r) SELECT x AS start, x AS end FROM r")
    conn.commit()
    conn.close()
    # WHEN the folder is loaded THEN views are never read: that file is another tool's SQLite, left alone at
    # once, and the export is analyzed
    store = load_path(tmp_path / "run", LoadOptions())
    assert list(store.ranks["rank"]) == [0] and _notes(store, "error") == []
    # AND given alone, it is not taken for an export (no input perftracker reads: exit 2)
    path.rename(tmp_path / "v.sqlite")
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "v.sqlite", LoadOptions())
    assert "none of the inputs could be used" in err.value.message


def test_older_schema_without_device_and_process_columns(tmp_path: Path) -> None:
    # GIVEN a SYNTHETIC export whose kernel table lacks deviceId and globalPid (an older or renamed schema)
    (tmp_path / "run").mkdir()
    synthetic_export(tmp_path / "run" / "old.sqlite", KERNELS, [], columns_missing=("deviceId", "globalPid"))
    # WHEN it is loaded THEN the kernels are read, and a note says which columns were missing
    store = load_path(tmp_path / "run", LoadOptions())
    assert int((store.events["kind"] == "compute").sum()) == len(KERNELS)
    assert any("no column device, gpid" in m for m in _notes(store, "warning")), store.notes


def test_hostile_strings_and_bad_values(tmp_path: Path) -> None:
    # GIVEN a SYNTHETIC export whose kernel and range names carry markup and control characters, and a
    # kernel row whose start is text
    hostile = "<script>alert(1)</script>\x1b[31m\x07kern"
    (tmp_path / "run").mkdir()
    path = synthetic_export(tmp_path / "run" / "rank_0.sqlite", [*KERNELS[:3], (0, 10, hostile)],
                            [(900_000, 2_000_000, "<img src=x onerror=alert(2)>")])
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('abc', 5, 0, 7, 99, ?, 10, 10)", (100 << 24,))
    conn.commit()
    conn.close()
    # WHEN it is analyzed
    result = analyzed(tmp_path / "run", tmp_path / "out", cache=False)
    # THEN the names are kept as data, the bad row is skipped with a note, and the report holds no raw markup
    assert hostile in set(result.store.events["name"].astype(str))
    assert any("1 of 5 rows skipped" in m for m in _notes(result.store, "warning"))
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "<img src=x" not in html


def test_row_cap_and_time_budget_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the real 2-GPU export and a row cap of 100 per table
    real_export(MFU, tmp_path / "run")
    monkeypatch.setenv("PERFTRACKER_NSYS_MAX_ROWS", "100")
    store = load_path(tmp_path / "run", LoadOptions())
    # THEN at most 100 kernels are read and a note says the cap and how to raise it
    assert int(store.events["kind"].isin(["compute", "comm"]).sum()) <= 100
    assert any("PERFTRACKER_NSYS_MAX_ROWS" in m for m in _notes(store, "warning"))
    # AND with a time budget too short for any query, the file is an error saying so
    monkeypatch.delenv("PERFTRACKER_NSYS_MAX_ROWS")
    monkeypatch.setenv("PERFTRACKER_NSYS_SECONDS", "0.000001")
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "run", LoadOptions())
    assert "time budget" in err.value.message or "PERFTRACKER_NSYS_SECONDS" in err.value.message


def test_over_the_file_cap_is_refused_with_the_cap_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_export(SAXPY, tmp_path / "run")
    monkeypatch.setenv("PERFTRACKER_MAX_FILE_BYTES", "1000")
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "run", LoadOptions())
    assert "PERFTRACKER_MAX_FILE_BYTES" in err.value.message


def test_the_export_is_never_written(tmp_path: Path) -> None:
    # GIVEN a real export WHEN it is analyzed THEN its bytes are unchanged and no journal/WAL file appears
    path = real_export(MFU, tmp_path / "run")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    path.chmod(0o444)
    analyzed(tmp_path / "run", tmp_path / "out", cache=False)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [MFU]


def test_report_without_nsys_on_path_says_how_to_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a .nsys-rep report and no nsys on PATH, beside a usable export of another rank
    real_export(SAXPY, tmp_path / "run", "rank_0.sqlite")
    (tmp_path / "run" / "rank_1.nsys-rep").write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    store = load_path(tmp_path / "run", LoadOptions())
    errors = _notes(store, "error")
    assert len(errors) == 1 and "rank_1.nsys-rep" in errors[0] and "nsys export --type sqlite" in errors[0]


def test_profiler_steps_and_rank_from_the_environment(tmp_path: Path) -> None:
    # GIVEN a SYNTHETIC export with ProfilerStep#4..#6 ranges, recorded under RANK=3 (torchrun ran nsys per rank)
    ranges = [(950_000 + i * 200_000, 1_140_000 + i * 200_000, f"ProfilerStep#{4 + i}") for i in range(3)]
    (tmp_path / "run").mkdir()
    synthetic_export(tmp_path / "run" / "report1.sqlite", KERNELS, ranges, env="LOCAL_RANK=1;RANK=3;WORLD_SIZE=4")
    store = load_path(tmp_path / "run", LoadOptions())
    # THEN the rank is 3 (from the environment), steps 4-6 come from the ranges, kernels carry them
    assert list(store.ranks["rank"]) == [3]
    assert list(store.steps["step"]) == [4, 5, 6]
    kernels = store.events[store.events["kind"] == "compute"].sort_values("start_ns")
    assert list(kernels["step"]) == [4, 4, 5, 5, 6, 6]
    assert any("rank 3 (from the recorded RANK)" in n.message for n in store.notes)


def test_report_is_exported_with_nsys_into_a_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a .nsys-rep and an `nsys` on PATH (a stand-in that writes the real saxpy export where
    # `nsys export --output` says, as the real one would)
    src = real_export(SAXPY, tmp_path / "src")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rank_5.nsys-rep").write_bytes(b"report")
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nsys"
    fake.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --output ]; then out=$2; fi; shift; done\n"
                    f"cp '{src}' \"$out\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    # WHEN the folder is loaded
    store = load_path(tmp_path / "run", LoadOptions())
    # THEN the report is read as rank 5 (its name), and nothing was written beside it
    assert list(store.ranks["rank"]) == [5] and store.ranks["file"].iloc[0].endswith("rank_5.nsys-rep")
    assert int((store.events["kind"] == "compute").sum()) == 5
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["rank_5.nsys-rep"]


def test_a_report_beside_its_export_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN rank_0.nsys-rep with its export rank_0.sqlite beside it, and no nsys on PATH
    real_export(SAXPY, tmp_path / "run", "rank_0.sqlite")
    (tmp_path / "run" / "rank_0.nsys-rep").write_bytes(b"report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    # WHEN loaded THEN the export is read, once, and the report needs no nsys
    store = load_path(tmp_path / "run", LoadOptions())
    assert list(store.ranks["rank"]) == [0] and _notes(store, "error") == []
