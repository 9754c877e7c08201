"""The output folders' pieces: `writing` (an OSError as the OutputError naming the file), report.html drawn
(`render_html`) and redrawn from a saved folder (`render_report`), the saved folder read back (`read_saved`; its
tables/ as untrusted input, `read_tables`: a file left out is a note, never a crash). The writers of a whole run
or comparison are `results.Run.write` / `RunDiff.write`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from perftracker import output_dir
from perftracker.analyzers.compare.summaries import OP_COLUMNS, SETTING_COLUMNS
from perftracker.analyzers.findings import Finding
from perftracker.analyzers.views import REPORT_VIEWS
from perftracker.bounded import open_regular
from perftracker.containment import inside, special_place
from perftracker.errors import InputError, output_error
from perftracker.output_names import DIFF_HTML, DIFF_JSON, FINDINGS, REPORT, TABLES, TIMELINE
from perftracker.redaction import plain_line, safe_tables, safe_text
from perftracker.reports import json_report
from perftracker.store import LoadNote
from perftracker.store.schema import TABLES as STORE_TABLES

__all__ = ["DIFF_HTML", "DIFF_JSON", "FINDINGS", "REPORT", "TABLES", "TIMELINE"]  # the names, also known from here


@contextmanager
def writing(path: Path, option: str = "-o") -> Iterator[None]:
    """An OSError raised while writing `path` (given with `option`) as the OutputError that says what to do."""
    try:
        yield
    except OSError as exc:
        raise output_error(path, exc, option) from None


def saved_output(path: Path) -> Path | None:
    """The analysis output folder at `path` (findings.json + tables/), or in a run directory's
    perftracker-out/; None when there is none."""
    for folder in (path, path / "perftracker-out"):
        if (folder / FINDINGS).is_file() and (folder / TABLES).is_dir():
            return folder
    return None


def origin_notes(folder: Path, document: Mapping[str, Any]) -> list[LoadNote]:
    """A warning when the folder's mark (`output_dir.made_from`: what the last analysis written there was made
    from) and its findings.json disagree: the folder may hold files of two runs, and is not read as either
    silently."""
    marked, said = output_dir.made_from(folder), str(document.get("input", ""))
    if not marked or marked == said:
        return []
    return [LoadNote("warning", str(folder), f"this output folder's mark says its last analysis was of {marked}, "
                     f"but its findings.json is of {said}: it may hold files of two runs; analyze again into a new "
                     "folder")]


def render_html(out_dir: Path, tables: Mapping[str, pd.DataFrame], findings: list[Finding], notes: list[LoadNote],
                title: str, summary: json_report.Summary) -> None:
    """report.html in `out_dir`, from the run's tables and findings (sections that cannot be drawn are noted)."""
    from perftracker.reports import html as html_report

    sections, failed = html_report.build_sections(tables, findings)
    notes = [*notes, *(LoadNote("warning", f"report section {name}", f"left out: its tables could not be drawn "
                                f"({why}). Re-run `perftracker analyze` to write them again.")
                       for name, why in failed)]
    html_report.render(out_dir / REPORT, findings, notes, sections, title=safe_text(title), coverage=summary.coverage,
                       synthetic=summary.synthetic_inputs or None, strip=html_report.summary_strip(tables, findings),
                       timeline_command=plain_line(timeline_command(title, out_dir, tables)),
                       timeline_file=TIMELINE if (out_dir / TIMELINE).is_file() else "")


def read_saved(folder: Path, follow_links: bool = False) -> tuple[dict[str, Any], list[Finding],
                                                                dict[str, pd.DataFrame], list[LoadNote]]:
    """A saved output's findings.json document, findings, tables and notes (the document's and those of tables
    left out), each read as untrusted input (`json_report.read`, `read_tables`)."""
    document, findings = json_report.read(folder / FINDINGS, follow_links)
    tables, table_notes = read_tables(folder / TABLES, follow_links)
    return document, findings, tables, [*(LoadNote.from_dict(n) for n in document.get("notes", [])), *table_notes]


def render_report(out_dir: Path, follow_links: bool = False) -> Path:
    """Re-render report.html from an output folder's findings.json and tables/ (each checked as it is read:
    `read_tables`; a table left out is a note on the page; with `follow_links`, links leading outside the
    folder are read)."""
    document, findings, tables, notes = read_saved(out_dir, follow_links)
    with output_dir.claimed(out_dir, "") as claim, writing(out_dir / REPORT, ""):
        claim.check(REPORT)
        render_html(out_dir, safe_tables(tables), findings, notes, str(document.get("input", out_dir)),
                    json_report.Summary.from_dict(document.get("summary") or {}))
        claim.wrote(REPORT)
    return out_dir / REPORT


def timeline_command(input_path: str, out_dir: Path, tables: Mapping[str, pd.DataFrame]) -> str:
    """The `perftracker timeline` command that writes this run's merged timeline next to its report (run
    from where `analyze` ran: the paths are as it was given them); "" when the run has no traces."""
    if not any(not tables.get(name, pd.DataFrame()).empty for name in ("ops", "kernels")):
        return ""
    return f"perftracker timeline {shlex.quote(input_path)} -o {shlex.quote(str(out_dir / TIMELINE))}"


MAX_TABLE_BYTES = 1024**3  # a real run's largest view (ops of 1,024 ranks) is tens of MB
MAX_TABLE_ROWS = 20_000_000
MAX_TABLE_MEMORY = 4 * 1024**3  # uncompressed, as the file's own metadata states it

# The kind of each column ("int", "float", "text") of the views whose columns are declared.
_KINDS = {"int": pa.types.is_integer, "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
          "text": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)
          or pa.types.is_null(t)}


VIEW_SCHEMAS: Mapping[str, Mapping[str, str]] = {
    "steps": {col: "int" if dtype.startswith("int") else "float" if dtype == "float64" else "text"
              for col, dtype in STORE_TABLES["steps"].items()},
    "op_totals": dict(zip(OP_COLUMNS, ["int", "text", "text", "int", "int", "int"], strict=True)),
    "settings": dict(zip(SETTING_COLUMNS, ["text", "text", "int", "text"], strict=True)),
}


def read_tables(folder: Path, follow_links: bool = False) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """Every report view in `folder` (an output's tables/) and a note per file left out or cut."""
    tables = {name: pd.DataFrame() for name in REPORT_VIEWS}
    notes: list[LoadNote] = []
    root = os.path.realpath(folder.parent)
    if folder.is_symlink() and not _allowed(folder, root, follow_links):
        notes.append(LoadNote("warning", str(folder), _link_reason(folder)))
        return tables, notes
    for name in REPORT_VIEWS:
        path = folder / f"{name}.parquet"
        if not path.exists() and not path.is_symlink():
            continue
        try:
            tables[name], extra = _read(path, name, root, follow_links)
        except _LeftOut as why:
            notes.append(LoadNote("warning", f"tables/{name}.parquet", f"{why}: its part of the report is left "
                                  "out. Re-run `perftracker analyze` to write it again."))
            continue
        if extra:
            notes.append(LoadNote("warning", f"tables/{name}.parquet", f"columns perftracker does not write "
                                  f"({', '.join(extra[:8])}) were dropped"))
    return tables, notes


class _LeftOut(Exception):
    """Why one table is not used (its message)."""


def _allowed(path: Path, root: str, follow_links: bool) -> bool:
    return not special_place(path) and (follow_links or inside(path, root))


def _link_reason(path: Path) -> str:
    target = os.path.realpath(path)
    if special_place(path):
        return f"a symlink to {target} (in {special_place(path)}): never read"
    return (f"a symlink leading outside the output folder, to {target}: not read (give --follow-links to read "
            "files that links lead to)")


def _read(path: Path, name: str, root: str, follow_links: bool) -> tuple[pd.DataFrame, list[str]]:
    if path.is_symlink() and not _allowed(path, root, follow_links):
        raise _LeftOut(_link_reason(path))
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_TABLE_BYTES:
                raise _LeftOut(f"larger than {MAX_TABLE_BYTES:,} bytes ({size:,})")
            parquet = pq.ParquetFile(handle)
            meta = parquet.metadata
            if meta.num_rows > MAX_TABLE_ROWS:
                raise _LeftOut(f"{meta.num_rows:,} rows, more than the {MAX_TABLE_ROWS:,} perftracker reads")
            memory = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if memory > MAX_TABLE_MEMORY:
                raise _LeftOut(f"{memory:,} bytes once read, more than {MAX_TABLE_MEMORY:,}")
            schema = parquet.schema_arrow
            _check_schema(schema, name, empty=meta.num_rows == 0)
            extra = [f for f in schema.names if name in VIEW_SCHEMAS and f not in VIEW_SCHEMAS[name]]
            wanted = [f for f in schema.names if f not in extra]
            frame = parquet.read(columns=wanted).to_pandas()
    except InputError as exc:
        raise _LeftOut(exc.what) from None
    except _LeftOut:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds for a damaged or foreign file
        raise _LeftOut(f"not a Parquet file perftracker can read ({type(exc).__name__}: {str(exc)[:200]})") from None
    return frame.reset_index(drop=True), extra


def _check_schema(schema: pa.Schema, name: str, empty: bool = False) -> None:
    if len(set(schema.names)) != len(schema.names) or not all(isinstance(n, str) and n for n in schema.names):
        raise _LeftOut("column names that are repeated or not text")
    for field in schema:
        kind = field.type
        if pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise _LeftOut(f"column {field.name!r} holds {kind}, not plain numbers or text")
    declared = VIEW_SCHEMAS.get(name)
    if declared is None:
        return
    missing = [c for c in declared if c not in schema.names]
    if missing:
        raise _LeftOut(f"columns {', '.join(missing[:8])} are missing")
    for col, want in declared.items():
        kind = schema.field(col).type
        if not _KINDS[want](kind) and not (empty and pa.types.is_null(kind)):  # an empty view's column has no type
            raise _LeftOut(f"column {col!r} holds {kind}, not {want}")
