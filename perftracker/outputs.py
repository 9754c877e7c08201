"""The output folders: what an analysis or a comparison writes, and how it is read and rendered again.

`write_run` writes tables/, findings.json, timeline.json.gz and report.html; `write_diff` diff.json and diff.html;
`render_report` redraws report.html from a folder. Every file is written then renamed; a failure is an
`OutputError` naming the file (`ReportNotWritten` carries the finished run).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pandas as pd

from perftracker import output_dir
from perftracker.analyzers.findings import Finding, safe_evidence
from perftracker.errors import OutputError, output_error
from perftracker.output_names import DIFF_HTML, DIFF_JSON, FINDINGS, REPORT, TABLES, TIMELINE
from perftracker.redaction import plain_line, safe_frame, safe_tables, safe_text
from perftracker.reports import json_report
from perftracker.saved_tables import read_tables
from perftracker.store import LoadNote

__all__ = ["DIFF_HTML", "DIFF_JSON", "FINDINGS", "REPORT", "TABLES", "TIMELINE"]  # the names, also known from here



class Run(Protocol):
    """What `write_run` writes of an analyzed run (`perftracker.results.Run`, which imports this module: the
    writer knows the run by its shape, so the two modules do not import each other)."""

    input: str
    findings: list[Finding]
    tables: dict[str, pd.DataFrame]
    notes: list[LoadNote]
    document: dict[str, Any]
    timeline: Any
    out_dir: Path | None

    @property
    def summary(self) -> json_report.Summary: ...

    @property
    def verdict(self) -> str: ...

    def write(self, out: str | Path) -> Path: ...


class Comparison(Protocol):
    """The tables of a comparison that diff.html draws (`perftracker.analyzers.compare.diff.RunComparison`)."""

    @property
    def ops(self) -> pd.DataFrame: ...

    @property
    def ranks(self) -> pd.DataFrame: ...

    @property
    def summary(self) -> dict[str, object]: ...


class RunDiff(Protocol):
    """What `write_diff` writes of a comparison (`perftracker.results.RunDiff`)."""

    document: dict[str, Any]
    title: str
    out_dir: Path | None

    @property
    def base(self) -> Run: ...

    @property
    def new(self) -> Run: ...

    @property
    def comparison(self) -> Comparison: ...

    @property
    def findings(self) -> list[Finding]: ...

    @property
    def verdict(self) -> str: ...


WrittenRun = TypeVar("WrittenRun", bound=Run)


class ReportNotWritten(OutputError, Generic[WrittenRun]):
    """The analysis finished, but its outputs could not be written: `result` is the finished analysis (a
    `Run`: findings, document, tables), for the verdict to be said all the same."""

    def __init__(self, cause: OutputError, result: WrittenRun, written: list[str]) -> None:
        kept = f" ({' and '.join(written)} written before it)" if written else ""
        super().__init__(cause.what, cause.where, cause.hint + kept)
        self.result = result


@contextmanager
def writing(path: Path, option: str = "-o") -> Iterator[None]:
    """An OSError raised while writing `path` (given with `option`) as the OutputError that says what to do."""
    try:
        yield
    except OSError as exc:
        raise output_error(path, exc, option) from None


def write_run(run: WrittenRun, out_dir: Path) -> None:
    """Write `run` into `out_dir` (ReportNotWritten naming what was written before a write failed)."""
    written: list[str] = []
    try:
        with output_dir.claimed(out_dir) as claim:  # one writer per folder; a planted link is replaced, never followed
            for rel in (FINDINGS, REPORT, TIMELINE):  # nothing perftracker did not write is in the way
                claim.check(rel)
            claim.made_from, claim.command = str(run.input), "analyze"
            tables = safe_tables(run.tables)
            with writing(out_dir / TABLES):
                output_dir.replace_tables(tables, out_dir / TABLES, claim)
            written.append(f"{TABLES}/")
            with writing(out_dir / FINDINGS):
                json_report.write(out_dir / FINDINGS, run.document)
                claim.wrote(FINDINGS)
            written.append(FINDINGS)
            if run.timeline is not None:
                with writing(out_dir / TIMELINE):
                    write_timeline(run.timeline, out_dir / TIMELINE, run.input)
                    claim.wrote(TIMELINE)
                written.append(TIMELINE)
            else:  # an earlier run's timeline is not this run's
                output_dir.remove_stale(out_dir / TIMELINE, claim)
            with writing(out_dir / REPORT):
                render_html(out_dir, tables, run.findings, run.notes, run.input, run.summary)
                claim.wrote(REPORT)
    except OutputError as exc:
        raise ReportNotWritten(exc, run, written) from None


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
    from perftracker.reports.strip import summary_strip

    sections, failed = html_report.build_sections(tables, findings)
    notes = [*notes, *(LoadNote("warning", f"report section {name}", f"left out: its tables could not be drawn "
                                f"({why}). Re-run `perftracker analyze` to write them again.")
                       for name, why in failed)]
    html_report.render(out_dir / REPORT, findings, notes, sections, title=safe_text(title), coverage=summary.coverage,
                       synthetic=summary.synthetic_inputs or None, strip=summary_strip(tables, findings),
                       timeline_command=plain_line(timeline_command(title, out_dir, tables)),
                       timeline_file=TIMELINE if (out_dir / TIMELINE).is_file() else "")


def render_report(out_dir: Path, follow_links: bool = False) -> Path:
    """Re-render report.html from an output folder's findings.json and tables/ (each checked as it is read:
    `saved_tables`; a table left out is a note on the page; with `follow_links`, links leading outside the
    folder are read)."""
    document, findings = json_report.read(out_dir / FINDINGS, follow_links)
    tables, table_notes = read_tables(out_dir / TABLES, follow_links)
    notes = [*(LoadNote.from_dict(n) for n in document.get("notes", [])), *table_notes]
    with output_dir.claimed(out_dir, "") as claim, writing(out_dir / REPORT, ""):
        claim.check(REPORT)
        render_html(out_dir, safe_tables(tables), findings, notes, str(document.get("input", out_dir)),
                    json_report.Summary.from_dict(document.get("summary") or {}))
        claim.wrote(REPORT)
    return out_dir / REPORT


def write_timeline(merged: Any, out: Path, title: str) -> int:
    """The merged timeline (`analyzers.traces.merged_timeline.MergedTimeline`) as a trace file; the events written."""
    from perftracker.reports import timeline_trace

    written: int = timeline_trace.write_trace(out, merged.events, merged.markers, merged.ranks, merged.steps,
                                              merged.offsets_ns, merged.note, title=title)
    return written


def timeline_command(input_path: str, out_dir: Path, tables: Mapping[str, pd.DataFrame]) -> str:
    """The `perftracker timeline` command that writes this run's merged timeline next to its report (run
    from where `analyze` ran: the paths are as it was given them); "" when the run has no traces."""
    has_traces = any(not tables.get(name, pd.DataFrame()).empty for name in ("ops", "kernels"))
    if not has_traces:
        return ""
    return f"perftracker timeline {shlex.quote(input_path)} -o {shlex.quote(str(out_dir / TIMELINE))}"


def write_diff(diff: RunDiff, out_dir: Path) -> None:
    """`diff.json` and `diff.html` in `out_dir`, and each side that was analyzed (not read from a saved output)
    into `out_dir/base` and `out_dir/new`, so that the page links both sides' reports. OutputError when a file
    cannot be written (each is written then renamed: none is left half-written)."""
    with output_dir.claimed(out_dir) as claim:
        for rel in (DIFF_JSON, DIFF_HTML):
            claim.check(rel)
        claim.command = claim.command or "diff"
        _write_diff(diff, out_dir, claim)
    diff.out_dir = out_dir


def _write_diff(diff: RunDiff, out_dir: Path, claim: output_dir.Claim) -> None:
    from perftracker.reports import diff_html

    reports: dict[str, str] = {}
    for label, side in (("base", diff.base), ("new", diff.new)):
        if side.out_dir is None:
            side.write(out_dir / label)
        if side.out_dir is not None and (side.out_dir / REPORT).is_file():
            reports[label] = Path(os.path.relpath(side.out_dir / REPORT, out_dir)).as_posix()
    with writing(out_dir / DIFF_JSON):
        json_report.write(out_dir / DIFF_JSON, diff.document)
        claim.wrote(DIFF_JSON)
    with writing(out_dir / DIFF_HTML):
        comparison = diff.comparison
        diff_html.render(out_dir / DIFF_HTML, diff.findings, safe_frame(comparison.ops), safe_frame(comparison.ranks),
                         safe_evidence(comparison.summary), title=safe_text(f"perftracker diff: {diff.title}"),
                         verdict=diff.verdict,
                         side_reports=reports)
        claim.wrote(DIFF_HTML)
