"""The analyze pipeline: load -> analyze (findings and report views, once) -> write findings.json,
tables/ and report.html.

Promise: `analyze_path` loads an input, runs one analysis stage (every analyzer, the root-cause
join, then every report view of `analyzers.views.REPORT_VIEWS`, sharing what the analyzers already
computed), saves the views as `tables/<name>.parquet` (plain columnar data, no markup), writes
findings.json and renders report.html from those tables and findings. `render_report` renders
report.html again from an output folder's findings.json and tables/ alone, through the same
renderer. `perftracker analyze`, `demo`, `postmortem`, `run` and `attach` call `analyze_path`;
`perftracker report` calls `render_report`. `diff_paths` is `perftracker diff`: two inputs analyzed (or
two saved outputs read), compared by `analyzers.compare.diff`, written as diff.json and diff.html.
`timeline_path` is `perftracker timeline`: one merged, clock-aligned trace of all ranks with the
findings marked. An output that cannot be written (a full disk, no permission) is an `OutputError`
naming the file; when the analysis itself finished it is a `ReportNotWritten`, which carries the
finished result, so a command still prints the verdict. Nothing half-written is left: every file is
written then renamed.
"""

from __future__ import annotations

import math
import os
import shlex
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker import output_dir
from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.compare.diff import DEFAULT_TOLERANCE, RunDiff, compare_runs
from perftracker.analyzers.compare.same_job import job_difference
from perftracker.analyzers.compare.side import RunSide, side_from_tables
from perftracker.analyzers.coverage import coverage, coverage_dict, known_hosts, known_ranks
from perftracker.analyzers.findings import Finding, rank_findings
from perftracker.analyzers.registry import run_analyzers
from perftracker.analyzers.rootcause import link_findings
from perftracker.analyzers.traces.merged_timeline import DEFAULT_MAX_EVENTS, MergedTimeline, merged_timeline
from perftracker.analyzers.views import REPORT_VIEWS
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.errors import InputError, OutputError, output_error
from perftracker.reports import diff_html, json_report, timeline_trace
from perftracker.reports import html as html_report
from perftracker.reports.strip import summary_strip
from perftracker.store import LoadNote, Store

FINDINGS = "findings.json"
REPORT = "report.html"
TABLES = "tables"
DIFF_JSON = "diff.json"
DIFF_HTML = "diff.html"
TIMELINE = "timeline.json.gz"


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


def analyze_path(path: Path, out_dir: Path, options: LoadOptions, hta_compat: bool = False,
                 timeline: bool = False) -> AnalysisResult:
    with output_dir.claimed(out_dir):  # held from the start: a second writer is refused before it loads
        return analyze_store(load_path(path, options), path, out_dir, hta_compat=hta_compat, timeline=timeline)


def analyze_store(store: Store, path: Path, out_dir: Path, hta_compat: bool = False,
                  timeline: bool = False) -> AnalysisResult:
    """Analyze one loaded Store (one job) and write its outputs into `out_dir` (ReportNotWritten when they
    cannot be written). With `timeline`, the merged all-rank timeline of this same analysis (the default
    selection of `perftracker timeline`) is written beside the report as `TIMELINE`, which the report links."""
    try:
        with output_dir.claimed(out_dir):
            return _analyze_and_write(store, path, out_dir, hta_compat, timeline)
    finally:
        store.close()  # the events' parts on disk, if the loader wrote any


def _analyze_and_write(store: Store, path: Path, out_dir: Path, hta_compat: bool, timeline: bool) -> AnalysisResult:
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
            output_dir.replace_tables(tables, out_dir / TABLES)
        written.append(f"{TABLES}/")
        with writing(out_dir / FINDINGS):
            json_report.write(out_dir / FINDINGS, document)
        written.append(FINDINGS)
        if timeline and store.n_events:
            with writing(out_dir / TIMELINE):
                _write_timeline(analysis, findings, out_dir / TIMELINE, str(path))
            written.append(TIMELINE)
        else:  # an earlier run's timeline is not this run's
            output_dir.remove_stale(out_dir / TIMELINE)
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
    run = tables["run_summary"]
    step = run.iloc[0] if not run.empty else None
    summary: dict[str, Any] = {
        "ranks": len(known_ranks(store)), "hosts": known_hosts(store),
        "coverage": coverage_dict(coverage(analysis)),
        "step_time_s": _finite(step["step_median_s"]) if step is not None else None,
        "step_spread_across_ranks_s": (_finite(step["step_slowest_rank_s"] - step["step_fastest_rank_s"])
                                       if step is not None else None),
        "hta_compat": analysis.options.hta_compat,
    }
    if store.run_info.synthetic_inputs:  # only runs that say so: a real run's summary has no such key
        summary["synthetic_inputs"] = [s.to_dict() for s in store.run_info.synthetic_inputs]
    return summary


def _finite(value: Any) -> float | None:
    """A float, or None for NaN (no steps, or a spread across fewer than two ranks)."""
    number = float(value)
    return None if math.isnan(number) else number


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
    """Every report view saved in `folder` (an empty frame for one that is not there, or that cannot be
    read: a damaged table costs its own part of the report, with a note from `_render`)."""
    tables = {}
    for name in REPORT_VIEWS:
        path = folder / f"{name}.parquet"
        try:
            # a regular file of ours: never a link (to /proc/kmsg, a device, elsewhere), a FIFO or a device
            tables[name] = pd.read_parquet(path) if path.is_file() and not path.is_symlink() else pd.DataFrame()
        except Exception:  # noqa: BLE001 - a damaged or foreign file: pyarrow raises many kinds
            tables[name] = pd.DataFrame()
    return tables


def _render(out_dir: Path, tables: Mapping[str, pd.DataFrame], findings: list[Finding], notes: list[LoadNote],
            title: str, summary: Mapping[str, Any]) -> None:
    sections, failed = html_report.build_sections_noting(tables, findings)
    notes = [*notes, *(LoadNote("warning", f"report section {name}", f"left out: its tables could not be drawn "
                                f"({why}). Re-run `perftracker analyze` to write them again.")
                       for name, why in failed)]
    html_report.render(out_dir / REPORT, findings, notes, sections, title=title, coverage=summary.get("coverage"),
                       synthetic=summary.get("synthetic_inputs"), strip=summary_strip(tables, findings),
                       timeline_command=timeline_command(title, out_dir, tables),
                       timeline_file=TIMELINE if (out_dir / TIMELINE).is_file() else "")


def _write_timeline(analysis: Analysis, findings: list[Finding], out: Path, title: str,
                    ranks: list[int] | None = None, steps: list[int] | None = None,
                    max_events: int = DEFAULT_MAX_EVENTS) -> tuple[int, MergedTimeline]:
    merged = merged_timeline(analysis, findings, ranks, steps, max_events)
    written = timeline_trace.write_trace(out, merged.events, merged.markers, merged.ranks, merged.steps,
                                         merged.offsets_ns, merged.note, title=title)
    return written, merged


def timeline_command(input_path: str, out_dir: Path, tables: Mapping[str, pd.DataFrame]) -> str:
    """The `perftracker timeline` command that writes this run's merged timeline next to its report (run
    from where `analyze` ran: the paths are as it was given them); "" when the run has no traces."""
    has_traces = any(not tables.get(name, pd.DataFrame()).empty for name in ("ops", "kernels"))
    if not has_traces:
        return ""
    return f"perftracker timeline {shlex.quote(input_path)} -o {shlex.quote(str(out_dir / TIMELINE))}"


def render_report(out_dir: Path) -> Path:
    """Re-render report.html from an output folder's findings.json and tables/."""
    document, findings = json_report.read(out_dir / FINDINGS)
    notes = [LoadNote.from_dict(n) for n in document.get("notes", [])]
    with output_dir.claimed(out_dir, ""), writing(out_dir / REPORT, ""):
        _render(out_dir, load_tables(out_dir / TABLES), findings, notes, str(document.get("input", out_dir)),
                document.get("summary") or {})
    return out_dir / REPORT


def diff_side(path: Path, label: str, out_dir: Path, options: LoadOptions) -> RunSide:
    """One side of `perftracker diff`: a saved analysis output (findings.json + tables/, also in a run
    directory's perftracker-out/) is read as it is; anything else is analyzed into `out_dir` first."""
    for folder in (path, path / "perftracker-out"):
        if (folder / FINDINGS).is_file() and (folder / TABLES).is_dir():
            _, findings = json_report.read(folder / FINDINGS)
            return side_from_tables(label, load_tables(folder / TABLES), findings)
    result = analyze_path(path, out_dir, options)
    return side_from_tables(label, result.tables, result.findings)


def side_report(path: Path, analyzed_into: Path) -> Path | None:
    """The report.html of one side of a diff: that of the saved analysis it was read from, or the one
    analyzed into `analyzed_into`; None when there is none."""
    for folder in (path, path / "perftracker-out", analyzed_into):
        if (folder / FINDINGS).is_file() and (folder / REPORT).is_file():
            return folder / REPORT
    return None


def diff_paths(base: Path, new: Path, out_dir: Path, options: LoadOptions,
               tolerance: float = DEFAULT_TOLERANCE, allow_different_jobs: bool = False) -> tuple[RunDiff, dict[str, Any]]:
    """`perftracker diff`: both sides (analyzed into out_dir/base and out_dir/new where needed), compared;
    writes out_dir/diff.json (findings in the usual schema) and out_dir/diff.html."""
    with output_dir.claimed(out_dir):
        return _diff_into(base, new, out_dir, options, tolerance, allow_different_jobs)


def _diff_into(base: Path, new: Path, out_dir: Path, options: LoadOptions,
               tolerance: float, allow_different_jobs: bool) -> tuple[RunDiff, dict[str, Any]]:
    sides = diff_side(base, "base", out_dir / "base", options), diff_side(new, "new", out_dir / "new", options)
    if (why := job_difference(*sides)) and not allow_different_jobs:
        raise InputError(f"the two runs look like different jobs: {why}", f"{base} -> {new}",
                         "diff compares two runs of one job; give --allow-different-jobs to compare them anyway")
    diff = compare_runs(*sides, tolerance)
    document = json_report.build(diff.findings, [], f"{base} -> {new}", {"diff": diff.summary})
    json_report.write(out_dir / DIFF_JSON, document)
    reports = {label: side_report(path, out_dir / label) for label, path in (("base", base), ("new", new))}
    diff_html.render(out_dir / DIFF_HTML, diff.findings, diff.ops, diff.ranks, diff.summary,
                     title=f"perftracker diff: {base} -> {new}",
                     side_reports={label: Path(os.path.relpath(report, out_dir)).as_posix()
                                   for label, report in reports.items() if report is not None})
    return diff, document


def timeline_path(path: Path, out: Path, options: LoadOptions, ranks: list[int] | None, steps: list[int] | None,
                  max_events: int) -> tuple[int, MergedTimeline]:
    """`perftracker timeline`: load, analyze (for the findings to mark and the clock offsets), merge, write."""
    analysis = Analysis(load_path(path, options))
    try:
        if not analysis.store.n_events:
            raise InputError("no profiler trace events to merge (no torch.profiler trace, or only empty ones)",
                             str(path), "give timeline a run directory or a folder with one torch.profiler trace "
                             "per rank (.json/.json.gz); `perftracker analyze` reads the other inputs")
        findings = rank_findings(run_analyzers(analysis))
        return _write_timeline(analysis, findings, out, str(path), ranks, steps, max_events)
    finally:
        analysis.store.close()
