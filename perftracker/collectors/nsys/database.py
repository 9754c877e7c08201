"""One Nsight Systems SQLite export, opened read-only and immutable, what its schema holds, and its rows.

Promise: `open_export(path)` checks the file (`perftracker/bounded.py`) and returns an `Export`: a connection
that can never write nor run the file's code, stopped past a time budget, with the real tables and their
columns. `read_table(export, spec)` runs one SELECT with an explicit column list, keeps rows with sane times and
stops at the row cap, giving int64 columns and notes; `strings` resolves the StringIds used. Anything wrong with
the file is an `ExportError` naming it. WAL and compressed files: see docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

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
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")  # invalid UTF-8 replaced, never an error
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


_DEFAULT_MAX_ROWS = 20_000_000
_IN_CHUNK = 500
_FETCH_BLOCK = 1 << 18


def max_rows() -> int:
    """The row cap per table (`PERFTRACKER_NSYS_MAX_ROWS`, default 20M)."""
    raw = os.environ.get("PERFTRACKER_NSYS_MAX_ROWS", "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) < 1 << 40 else _DEFAULT_MAX_ROWS


@dataclass(frozen=True)
class TableSpec:
    """What to read of one table: integer columns (name -> the first of its spellings the file has), and
    optionally one text column (read as text, not through StringIds)."""

    table: str
    ints: dict[str, tuple[str, ...]]
    text: str = ""
    where: str = ""  # an extra SQL condition on columns every version has (e.g. the NVTX range event types)


@dataclass
class Rows:
    """One table's rows: int64 columns by their spec names, the text column if asked, and notes."""

    table: str
    cols: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    text: list[str | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.cols.get("start", ()))

    def take(self, mask: npt.NDArray[np.bool_]) -> Rows:
        idx = np.flatnonzero(mask)
        return Rows(self.table, {k: v[idx] for k, v in self.cols.items()},
                    [self.text[i] for i in idx.tolist()] if self.text else [], self.notes)


def read_table(export: Export, spec: TableSpec) -> Rows:
    """The rows of `spec.table` (empty Rows when the file has no such table or no start/end columns)."""
    rows = Rows(spec.table)
    if spec.table not in export.columns:
        return rows
    have = export.columns[spec.table]
    if not {"start", "end"} <= have:
        rows.notes.append(f"{spec.table} has no start/end columns (an Nsight version perftracker does not know); "
                          "not read")
        return rows
    exprs, missing = [], []
    for name, spellings in spec.ints.items():
        column = next((c for c in spellings if c in have), None)
        exprs.append(f'(CASE WHEN typeof("{column}") = \'integer\' THEN "{column}" ELSE -1 END)' if column else "-1")
        if column is None:
            missing.append(name)
    cap = max_rows()
    where = spec.where if spec.where.split(" ")[0] in have else ""
    good = ("typeof(start) = 'integer' AND typeof(\"end\") = 'integer' AND start >= 0 AND \"end\" >= start"
            + (f" AND {where}" if where else ""))
    sql = f'SELECT {", ".join(exprs)} FROM "{spec.table}" WHERE {good} LIMIT {cap + 1}'
    try:
        cursor = export.conn.execute(sql)
        blocks = []  # a block of rows at a time into numpy: never every row as Python tuples at once
        while block := cursor.fetchmany(_FETCH_BLOCK):
            blocks.append(np.array(block, dtype=np.int64).reshape(len(block), len(exprs)))
        table = np.concatenate(blocks) if blocks else np.zeros((0, len(exprs)), np.int64)
        capped = len(table) > cap
        n = min(len(table), cap)
        table = table[:n]
        if spec.text:  # the same scan (table order, same filter) for the text column alone
            column = f'substr("{spec.text}", 1, {MAX_TEXT})' if spec.text in have else "NULL"
            texts = [v for (v,) in export.conn.execute(f'SELECT {column} FROM "{spec.table}" WHERE {good} LIMIT {n}')]
            texts = (texts + [None] * n)[:n]
            rows.text = [v if isinstance(v, str) or v is None else str(v)[:MAX_TEXT] for v in texts]
        total = None if capped else int(export.conn.execute(
            f'SELECT count(*) FROM "{spec.table}"' + (f" WHERE {where}" if where else "")).fetchone()[0])
    except sqlite3.Error as exc:
        raise ExportError(f"{export.path}: table {spec.table} could not be read ({_why(exc)})") from None
    for i, name in enumerate(spec.ints):
        rows.cols[name] = table[:, i]
    if capped:
        rows.notes.append(f"{spec.table}: more than {cap:,} rows; only the first {cap:,} (in table order) were "
                          "read (set PERFTRACKER_NSYS_MAX_ROWS to raise the cap)")
    elif total is not None and total > n:
        rows.notes.append(f"{spec.table}: {total - n:,} of {total:,} rows skipped (times not integers, negative "
                          "or ending before they start)")
    if missing and n:
        rows.notes.append(f"{spec.table}: no column {', '.join(missing)} in this Nsight version; read as unknown")
    return rows


def _why(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "interrupted" in text:
        return "stopped: the export took longer than its time budget, PERFTRACKER_NSYS_SECONDS"
    return f"damaged or truncated file: {text}"


def strings(export: Export, ids: Iterable[int]) -> dict[int, str]:
    """StringIds values of these ids (cut to MAX_TEXT characters); ids the table lacks are absent."""
    wanted = sorted({int(i) for i in ids if int(i) >= 0})
    found: dict[int, str] = {}
    if not export.has("StringIds", "id", "value"):
        return found
    try:
        for at in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[at:at + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, value in export.conn.execute(
                    f"SELECT id, substr(value, 1, {MAX_TEXT}) FROM StringIds WHERE id IN ({marks})", chunk):
                if isinstance(key, int):
                    found[key] = value if isinstance(value, str) else str(value)[:MAX_TEXT]
    except sqlite3.Error as exc:
        raise ExportError(f"{export.path}: table StringIds could not be read ({_why(exc)})") from None
    return found


def scalar_rows(export: Export, table: str, columns: tuple[str, ...], limit: int = 10_000) -> list[tuple[object, ...]]:
    """Up to `limit` rows of a small metadata table, only the columns it has (missing ones as None)."""
    if table not in export.columns:
        return []
    have = export.columns[table]
    exprs = [f'(CASE WHEN typeof("{c}") = \'text\' THEN substr("{c}", 1, {MAX_TEXT}) ELSE "{c}" END)'
             if c in have else "NULL" for c in columns]
    try:
        return list(export.conn.execute(f'SELECT {", ".join(exprs)} FROM "{table}" LIMIT {limit}'))
    except sqlite3.Error as exc:
        raise ExportError(f"{export.path}: table {table} could not be read ({_why(exc)})") from None
