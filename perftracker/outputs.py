"""The output folders' pieces: `writing` (an OSError as the OutputError naming the file), report.html drawn
(`render_html`) and redrawn from a saved folder (`render_report`), the saved folder read back (`read_saved`). The
writers of a whole run or comparison are `results.Run.write` / `RunDiff.write`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker import output_dir
from perftracker.analyzers.findings import Finding
from perftracker.errors import output_error
from perftracker.output_names import DIFF_HTML, DIFF_JSON, FINDINGS, REPORT, TABLES, TIMELINE
from perftracker.redaction import plain_line, safe_tables, safe_text
from perftracker.reports import json_report
from perftracker.saved_tables import read_tables
from perftracker.store import LoadNote

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
    left out), each read as untrusted input (`json_report.read`, `saved_tables`)."""
    document, findings = json_report.read(folder / FINDINGS, follow_links)
    tables, table_notes = read_tables(folder / TABLES, follow_links)
    return document, findings, tables, [*(LoadNote.from_dict(n) for n in document.get("notes", [])), *table_notes]


def render_report(out_dir: Path, follow_links: bool = False) -> Path:
    """Re-render report.html from an output folder's findings.json and tables/ (each checked as it is read:
    `saved_tables`; a table left out is a note on the page; with `follow_links`, links leading outside the
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
