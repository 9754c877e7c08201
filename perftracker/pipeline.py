"""The analyze pipeline: load -> analyze (findings and report views, once) -> write findings.json,
tables/ and report.html.

Promise: `analyze_path` loads an input, runs one analysis stage (every analyzer, the root-cause
join, then every report view of `analyzers.views.REPORT_VIEWS`, sharing what the analyzers already
computed), saves the views as `tables/<name>.parquet` (plain columnar data, no markup), writes
findings.json and renders report.html from those tables and findings. `render_report` renders
report.html again from an output folder's findings.json and tables/ alone, through the same
renderer. `perftracker analyze`, `demo`, `postmortem`, `run` and `attach` call `analyze_path`;
`perftracker report` calls `render_report`. An output that cannot be written (a full disk, no
permission) is an `OutputError` naming the file; when the analysis itself finished it is a
`ReportNotWritten`, which carries the finished result, so a command still prints the verdict.
Nothing half-written is left: every file is written then renamed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.coverage import coverage, coverage_dict, known_hosts, known_ranks
from perftracker.analyzers.findings import Finding, rank_findings
from perftracker.analyzers.registry import run_analyzers
from perftracker.analyzers.rootcause import link_findings
from perftracker.analyzers.views import REPORT_VIEWS
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.errors import OutputError, output_error
from perftracker.reports import html as html_report
from perftracker.reports import json_report
from perftracker.store import LoadNote, Store

FINDINGS = "findings.json"
REPORT = "report.html"
TABLES = "tables"


@dataclass
class AnalysisResult:
    store: Store
    findings: list[Finding]
    out_dir: Path
    document: dict[str, Any]
    tables: dict[str, pd.DataFrame]

    @property
    def report_path(self) -> Path:
        return self.out_dir / REPORT


class ReportNotWritten(OutputError):
    """The analysis finished, but its outputs could not be written: `result` is the finished analysis
    (findings, document, tables), for the verdict to be said all the same."""

    def __init__(self, cause: OutputError, result: AnalysisResult, written: list[str]) -> None:
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


def analyze_path(path: Path, out_dir: Path, options: LoadOptions, hta_compat: bool = False) -> AnalysisResult:
    return analyze_store(load_path(path, options), path, out_dir, hta_compat=hta_compat)


def analyze_store(store: Store, path: Path, out_dir: Path, hta_compat: bool = False) -> AnalysisResult:
    """Analyze one loaded Store (one job) and write its outputs into `out_dir` (ReportNotWritten when they
    cannot be written)."""
    analysis = Analysis(store, AnalysisOptions(hta_compat=hta_compat))
    findings, tables, failed = analyze(analysis)
    summary = _summary(analysis, tables)
    notes = [*store.notes, *failed]
    document = json_report.build(findings, notes, str(path), summary)
    result = AnalysisResult(store, findings, out_dir, document, tables)
    written: list[str] = []
    try:
        with writing(out_dir):
            out_dir.mkdir(parents=True, exist_ok=True)
        with writing(out_dir / TABLES):
            save_tables(tables, out_dir / TABLES)
        written.append(f"{TABLES}/")
        with writing(out_dir / FINDINGS):
            json_report.write(out_dir / FINDINGS, document)
        written.append(FINDINGS)
        with writing(out_dir / REPORT):
            _render(out_dir, tables, findings, notes, str(path), summary)
    except OutputError as exc:
        raise ReportNotWritten(exc, result, written) from None
    return result


def analyze(analysis: Analysis) -> tuple[list[Finding], dict[str, pd.DataFrame], list[LoadNote]]:
    """The analysis stage: ranked, linked findings and every report view (an empty table, and a note, for a
    view that fails: one broken view must not blank the report)."""
    findings = rank_findings(link_findings(analysis, run_analyzers(analysis)))
    tables: dict[str, pd.DataFrame] = {}
    failed: list[LoadNote] = []
    for name, fn in REPORT_VIEWS.items():
        try:
            tables[name] = analysis.view(fn)
        except Exception as exc:  # the analyzer sharing it already reported the crash as a finding
            tables[name] = pd.DataFrame()
            failed.append(LoadNote("warning", f"report view {name}",
                                   f"could not be computed ({type(exc).__name__}: {exc}); its part of the report "
                                   "is left out. This is a perftracker bug; please report it."))
    return findings, tables, failed


def _summary(analysis: Analysis, tables: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    store = analysis.store
    stats = tables["step_stats"]
    summary: dict[str, Any] = {
        "ranks": len(known_ranks(store)), "hosts": known_hosts(store),
        "coverage": coverage_dict(coverage(analysis)),
        "step_time_s": float(stats["median_s"].median()) if not stats.empty else None,
        "hta_compat": analysis.options.hta_compat,
    }
    if store.run_info.synthetic_inputs:  # only runs that say so: a real run's summary has no such key
        summary["synthetic_inputs"] = [s.to_dict() for s in store.run_info.synthetic_inputs]
    return summary


def save_tables(tables: Mapping[str, pd.DataFrame], folder: Path) -> None:
    """Each table as `<name>.parquet`, written then renamed: a concurrent reader sees a whole file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        tmp = folder / f".{name}.{uuid.uuid4().hex}.parquet.tmp"
        try:
            frame.reset_index(drop=True).to_parquet(tmp, index=False)
            os.replace(tmp, folder / f"{name}.parquet")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def load_tables(folder: Path) -> dict[str, pd.DataFrame]:
    """Every report view saved in `folder` (an empty frame for one that is not there)."""
    tables = {}
    for name in REPORT_VIEWS:
        path = folder / f"{name}.parquet"
        tables[name] = pd.read_parquet(path) if path.exists() else pd.DataFrame()
    return tables


def _render(out_dir: Path, tables: Mapping[str, pd.DataFrame], findings: list[Finding], notes: list[LoadNote],
            title: str, summary: Mapping[str, Any]) -> None:
    sections = html_report.build_sections(tables, findings)
    html_report.render(out_dir / REPORT, findings, notes, sections, title=title, coverage=summary.get("coverage"),
                       synthetic=summary.get("synthetic_inputs"))


def render_report(out_dir: Path) -> Path:
    """Re-render report.html from an output folder's findings.json and tables/."""
    document, findings = json_report.read(out_dir / FINDINGS)
    notes = [LoadNote.from_dict(n) for n in document.get("notes", [])]
    with writing(out_dir / REPORT, ""):
        _render(out_dir, load_tables(out_dir / TABLES), findings, notes, str(document.get("input", out_dir)),
                document.get("summary") or {})
    return out_dir / REPORT
