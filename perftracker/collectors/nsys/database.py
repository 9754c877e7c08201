"""One Nsight Systems SQLite export, opened read-only and immutable, and what its schema holds.

Promise: `open_export(path)` checks the file (`perftracker/bounded.py`) and returns an `Export`: a connection
that can never write nor run the file's code, stopped past a time budget, with the real tables and their
columns. Anything wrong with the file is an `ExportError` naming it. WAL and compressed files: see
docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from pathlib import Path

from perftracker.bounded import file_cap, open_regular
from perftracker.errors import InputError

SQLITE_HEADER = b"SQLite format 3\x00"
# The tables whose presence says "an Nsight Systems export" (any one of the first with StringIds).
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                   "CUPTI_ACTIVITY_KIND_MEMCPY")
_DEFAULT_SECONDS = 600.0
MAX_TEXT = 4096  # characters kept of any string the file holds (kernel names run to a few hundred)
_NOT_NSYS = "not an Nsight Systems export"
_COMPRESSED = (b"\x1f\x8b", b"PK\x03\x04")  # gzip, zip


def _wal_of(path: Path) -> Path | None:
    """The write-ahead log beside an export in WAL mode (`<name>-wal`, not empty), or None."""
    wal = Path(f"{path}-wal")
    try:
        return wal if wal.is_file() and wal.stat().st_size > 0 else None
    except OSError:
        return None


def _copy_bounded(src: Path, dst: Path) -> int:
    """Copy a regular file (never a FIFO or device); the bytes copied."""
    with open_regular(src) as handle, open(dst, "wb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)
        return out.tell()


class ExportError(Exception):
    """An export that cannot be read: the message says what and where."""


def time_budget() -> float:
    """Seconds any one export may take (`PERFTRACKER_NSYS_SECONDS`, default 600)."""
    raw = os.environ.get("PERFTRACKER_NSYS_SECONDS", "").strip()
    try:
        value = float(raw) if raw else _DEFAULT_SECONDS
    except ValueError:
        return _DEFAULT_SECONDS
    return value if 0 < value < 1e7 else _DEFAULT_SECONDS


class Export:
    """An open export: its connection and its tables' columns (name -> set of column names)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, size: int = 0, copy_dir: Path | None = None) -> None:
        self.path = path
        self.conn = conn
        self.columns: dict[str, set[str]] = {}
        self.size = size
        self.copy_dir = copy_dir  # the temporary copy of a WAL-mode export (removed on close)

    def has(self, table: str, *cols: str) -> bool:
        return table in self.columns and all(c in self.columns[table] for c in cols)

    def close(self) -> None:
        self.conn.close()
        if self.copy_dir is not None:
            shutil.rmtree(self.copy_dir, ignore_errors=True)


def _text(raw: bytes) -> str:
    """A TEXT value as str: invalid UTF-8 replaced, never an error."""
    return raw.decode("utf-8", "replace")


def looks_like_export(path: Path) -> bool:
    """Whether `path` is an Nsight Systems input: a `.nsys-rep` / `.qdrep` report, or a `.sqlite` with the
    SQLite header whose schema holds StringIds and a CUPTI / NVTX table. Another tool's SQLite file is left
    alone (not one of our inputs); a damaged one with the header is ours to report."""
    name = path.name.lower()
    if name.endswith((".nsys-rep", ".qdrep")):
        return True
    if not name.endswith(".sqlite"):
        return False
    try:
        with open_regular(path) as handle:
            head = handle.read(len(SQLITE_HEADER))
            if head.startswith(_COMPRESSED):
                return True  # a compressed export under an export's name: the reader says to decompress it
            if head != SQLITE_HEADER:
                return False
    except (InputError, OSError):
        return True  # let the reader say what is wrong with it
    try:
        open_export(path, budget_s=10.0).close()
    except ExportError as exc:
        return _NOT_NSYS not in str(exc)
    return True


def open_export(path: Path, budget_s: float | None = None) -> Export:
    """The export at `path` opened read-only and immutable (ExportError when it cannot be used)."""
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(len(SQLITE_HEADER))
    except InputError as exc:
        raise ExportError(exc.message) from None
    except OSError as exc:
        raise ExportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    cap = file_cap()
    if size > cap:
        raise ExportError(f"{path}: the export is {size:,} bytes, over perftracker's per-file cap of {cap:,}; "
                          "not read (set PERFTRACKER_MAX_FILE_BYTES to raise the cap, or export a shorter "
                          "range: nsys export --times / nsys profile --capture-range)")
    if head.startswith(_COMPRESSED):
        kind, how = ("gzip", "gunzip") if head.startswith(b"\x1f\x8b") else ("zip", "unzip")
        raise ExportError(f"{path}: a {kind} file named like an Nsight Systems export; not read: decompress it "
                          f"({how}) and give the .sqlite it holds")
    if head != SQLITE_HEADER:
        raise ExportError(f"{path}: not an SQLite database (no SQLite header); export the report with "
                          "`nsys export --type sqlite`")
    wal = _wal_of(path)
    copy_dir = None
    try:
        if wal is None:
            uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro&immutable=1"
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:  # WAL mode: its rows are in the log; read a private copy of both (the inputs are never written)
            if size + wal.stat().st_size > cap:
                raise ExportError(f"{path}: the export and its write-ahead log {wal.name} together are over "
                                  f"perftracker's per-file cap of {cap:,}; not read (checkpoint it: "
                                  f"sqlite3 {path.name} 'PRAGMA wal_checkpoint(TRUNCATE)')")
            copy_dir = Path(tempfile.mkdtemp(prefix="perftracker-nsys-wal-"))
            copy = copy_dir / "export.sqlite"
            size = _copy_bounded(path, copy) + _copy_bounded(wal, Path(f"{copy}-wal"))
            conn = sqlite3.connect(str(copy), check_same_thread=False)
    except (sqlite3.Error, OSError, InputError) as exc:
        if copy_dir is not None:
            shutil.rmtree(copy_dir, ignore_errors=True)
        raise ExportError(f"{path}: SQLite cannot open it ({getattr(exc, 'message', exc)})") from None
    conn.text_factory = _text
    deadline = time.monotonic() + (budget_s if budget_s is not None else time_budget())
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 100_000)
    export = Export(path, conn, size=size, copy_dir=copy_dir)
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA trusted_schema = OFF")
        tables = [str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'ENUM_%' LIMIT 100000")]
        for table in tables:
            if table.replace("_", "").isalnum():  # names are interpolated into SQL below: plain names only
                export.columns[table] = {str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')}
    except sqlite3.Error as exc:
        export.close()
        raise ExportError(f"{path}: damaged or truncated SQLite file ({exc}); export it again with "
                          "`nsys export --type sqlite`") from None
    if "StringIds" not in export.columns or not any(t in export.columns for t in ACTIVITY_TABLES):
        export.close()
        raise ExportError(f"{path}: an SQLite file but {_NOT_NSYS} (no StringIds table with "
                          f"any of {', '.join(ACTIVITY_TABLES)})")
    return export
