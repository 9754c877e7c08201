"""Round three: Nsight Systems exports never silently dropped. The probes: an export in WAL mode (its rows in
`rank_0.sqlite-wal`: opened immutable, the main file has no tables; the rank was dropped with no note) and gzip
or zip files named `rank_N.sqlite` (ignored with no note). Real exports (tests/fixtures/nsys)."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import zipfile
from pathlib import Path

from nsys_fixtures import SAXPY, real_export

from perftracker.collectors.loading import LoadOptions, load_path


def _wal_copy(src: Path, folder: Path, name: str) -> Path:
    """`src`'s tables in a new export left in WAL mode: the main file without tables, every row in its -wal."""
    work = folder / "work"
    work.mkdir(parents=True)
    dst = work / name
    conn = sqlite3.connect(dst)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("ATTACH DATABASE ? AS s", (str(src),))
    for (table,) in conn.execute("SELECT name FROM s.sqlite_master WHERE type = 'table'").fetchall():
        conn.execute(f'CREATE TABLE "{table}" AS SELECT * FROM s."{table}"')
    conn.commit()
    conn.execute("DETACH DATABASE s")
    out = folder / "run" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dst, out)  # while the writer is open: the rows are still in the log only
    shutil.copyfile(f"{dst}-wal", f"{out}-wal")
    conn.close()
    return out


def test_an_export_in_wal_mode_is_read(tmp_path: Path) -> None:
    # GIVEN a real export turned into a WAL-mode one whose main file holds no table
    src = real_export(SAXPY, tmp_path / "src")
    export = _wal_copy(src, tmp_path, "rank_0.sqlite")
    assert sqlite3.connect(f"file:{export}?mode=ro&immutable=1", uri=True).execute(
        "SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    # WHEN the folder is loaded THEN the rank is read, and the inputs are untouched
    before = {p.name: p.read_bytes() for p in export.parent.iterdir()}
    store = load_path(export.parent, LoadOptions(cache_dir=None, workers=1))
    assert list(store.ranks["file"]) == [str(export)]
    assert len(store.events) > 0
    assert {p.name: p.read_bytes() for p in export.parent.iterdir()} == before


def test_compressed_files_named_as_exports_are_named_in_a_note(tmp_path: Path) -> None:
    # GIVEN a real export beside a gzip and a zip file named rank_1.sqlite and rank_2.sqlite
    run = tmp_path / "run"
    good = real_export(SAXPY, run, "rank_0.sqlite")
    (run / "rank_1.sqlite").write_bytes(gzip.compress(good.read_bytes()[:200_000]))
    with zipfile.ZipFile(run / "rank_2.sqlite", "w") as archive:
        archive.writestr("rank_2.sqlite", b"SQLite format 3\x00")
    # WHEN loaded THEN the good one is read, and each compressed one is named, saying to decompress it
    store = load_path(run, LoadOptions(cache_dir=None, workers=1))
    assert list(store.ranks["file"]) == [str(good)]
    said = " ".join(f"{n.source}: {n.message}" for n in store.notes)
    assert "rank_1.sqlite" in said and "gzip" in said and "rank_2.sqlite" in said and "zip" in said
