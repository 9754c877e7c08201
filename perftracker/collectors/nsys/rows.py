"""Rows of an export's activity tables as numpy columns: SQL names the columns, filters bad rows, caps.

Promise: `read_table(export, spec)` runs one SELECT with an explicit column list, keeps rows with sane times,
stops at the row cap (`PERFTRACKER_NSYS_MAX_ROWS`) and returns int64 arrays, saying what it left out;
`strings` resolves just the StringIds used. SQLite errors become `ExportError`s naming the file and table.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perftracker.collectors.nsys.database import MAX_TEXT, Export, ExportError

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


def _int_expr(column: str) -> str:
    return f'(CASE WHEN typeof("{column}") = \'integer\' THEN "{column}" ELSE -1 END)'


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
        exprs.append(_int_expr(column) if column else "-1")
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
