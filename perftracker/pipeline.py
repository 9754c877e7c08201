"""The analysis stages behind the API (`perftracker/api.py`): a loaded Store to a `Run`, two runs to a `RunDiff`.

`run_of` runs every analyzer, the finding passes and every report view once, and builds findings.json's
document; `findings_of` the findings alone; `read_run` a saved output; `diff_runs` two runs. It writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.compare.diff import DEFAULT_TOLERANCE, compare_runs
from perftracker.analyzers.compare.side import job_difference, side_from_tables
from perftracker.analyzers.coverage import coverage, coverage_dict, known_hosts, known_ranks
from perftracker.analyzers.findings import Finding
from perftracker.analyzers.passes import apply_passes
from perftracker.analyzers.registry import run_analyzers
from perftracker.analyzers.thresholds import Thresholds
from perftracker.analyzers.thresholds import active as active_thresholds
from perftracker.analyzers.traces.merged_timeline import DEFAULT_MAX_EVENTS, MergedTimeline, merged_timeline
from perftracker.analyzers.views import report_tables
from perftracker.errors import InputError
from perftracker.outputs import origin_notes, read_saved
from perftracker.reports import json_report
from perftracker.reports.json_report import RunFacts
from perftracker.results import Run, RunDiff
from perftracker.store import LoadNote

MAX_TIMELINE_NOTES = 5  # the input notes a timeline's one note line names (the rest are counted)


def findings_of(analysis: Analysis) -> list[Finding]:
    """Every analyzer's findings through every finding pass (`analyzers.passes.FINDING_PASSES`: replay costs,
    root-cause links, folds, roles, ranking): the findings of a report."""
    return apply_passes(analysis, run_analyzers(analysis))


def analyze(analysis: Analysis) -> tuple[list[Finding], dict[str, pd.DataFrame], list[LoadNote]]:
    """The analysis stage: ranked, linked findings and every report view (an empty table, and a note, for a
    view that fails: one broken view must not blank the report)."""
    findings = findings_of(analysis)
    failed: dict[str, Exception] = {}
    tables = report_tables(analysis, failed)  # the analyzer sharing a failed view already reported it as a finding
    notes = [LoadNote("warning", f"report view {name}",
                      f"could not be computed ({type(exc).__name__}: {exc}); its part of the report "
                      "is left out. This is a perftracker bug; please report it.") for name, exc in failed.items()]
    return findings, tables, notes


def run_of(analysis: Analysis, input_path: str, timeline: bool = False) -> Run:
    """One analysis of `analysis.store` as a `Run` (nothing written). With `timeline`, the merged all-rank
    timeline of these findings (the default selection of `perftracker timeline`) when the run has events."""
    store = analysis.store
    findings, tables, failed = analyze(analysis)
    notes = [*store.notes, *failed]
    summary = json_report.summary_of(findings, _facts(analysis, tables))
    document = json_report.build(findings, notes, input_path, summary)
    if analysis.thresholds.changed():
        document["thresholds_changed"] = analysis.thresholds.changed()
    merged = merged_timeline(analysis, findings) if timeline and store.n_events else None
    return Run(input_path, findings, tables, notes, document, summary, store.run_info, merged, store=store)


def timeline_of(analysis: Analysis, input_path: str, ranks: list[int] | None = None, steps: list[int] | None = None,
                max_events: int = DEFAULT_MAX_EVENTS) -> MergedTimeline:
    """The merged, clock-aligned timeline of the chosen ranks and steps, with the report's findings marked
    (InputError without trace events); its note also names the inputs left out or cut (links out of the input
    among them), as the store's notes say."""
    if not analysis.store.n_events:
        raise InputError("no profiler trace events to merge (no torch.profiler trace, or only empty ones)",
                         input_path, "give timeline a run directory or a folder with one torch.profiler trace "
                         "per rank (.json/.json.gz); `perftracker analyze` reads the other inputs")
    merged = merged_timeline(analysis, findings_of(analysis), ranks, steps, max_events)
    left = [n for n in analysis.store.notes if n.level in ("warning", "error")]
    if not left:
        return merged
    said = "; ".join(f"{n.source}: {n.message}" for n in left[:MAX_TIMELINE_NOTES])
    more = f" (and {len(left) - MAX_TIMELINE_NOTES} more)" if len(left) > MAX_TIMELINE_NOTES else ""
    return replace(merged, note="; ".join(filter(None, [merged.note, f"inputs left out or cut: {said}{more}"])))


def _facts(analysis: Analysis, tables: Mapping[str, pd.DataFrame]) -> RunFacts:
    store = analysis.store
    run = tables["run_summary"]
    step = run.iloc[0] if not run.empty else None
    return RunFacts(
        ranks=len(known_ranks(store)), hosts=known_hosts(store), coverage=coverage_dict(coverage(analysis)),
        step_time_s=_finite(step["step_median_s"]) if step is not None else None,
        step_spread_across_ranks_s=(_finite(step["step_slowest_rank_s"] - step["step_fastest_rank_s"])
                                    if step is not None else None),
        hta_compat=analysis.options.hta_compat,
        synthetic_inputs=[s.to_dict() for s in store.run_info.synthetic_inputs])


def _finite(value: Any) -> float | None:
    """A float, or None for NaN (no steps, or a spread across fewer than two ranks)."""
    number = float(value)
    return None if math.isnan(number) else number


def read_run(folder: Path, follow_links: bool = False) -> Run:
    """A saved analysis output (findings.json + tables/, each checked as it is read: a table left out is a
    note) as a `Run` (`out_dir` is the folder); with `follow_links`, links leading outside it are read."""
    document, findings, tables, notes = read_saved(folder, follow_links)
    return Run(str(document.get("input", folder)), findings, tables, [*notes, *origin_notes(folder, document)], document,
               json_report.Summary.from_dict(document["summary"]), out_dir=folder)


def diff_runs(base: Run, new: Run, title: str, tolerance: float = DEFAULT_TOLERANCE,
              thresholds: Mapping[str, object] | None = None, allow_different_jobs: bool = False) -> RunDiff:
    """Compare two runs against the noise of running a job twice; the document says the one diff verdict.
    `thresholds` overrides declared thresholds by name for the comparison (diff.json records them). Two runs
    that look like different jobs (`compare.side.job_difference`) are an InputError unless `allow_different_jobs`."""
    sides = side_from_tables("base", base.tables, base.findings), side_from_tables("new", new.tables, new.findings)
    if (why := job_difference(*sides)) and not allow_different_jobs:
        saved = "".join(f"; {label} {run.out_dir} is the saved analysis of {run.input}"
                        for label, run in (("base", base), ("new", new)) if run.out_dir is not None)
        raise InputError(f"the two runs look like different jobs: {why}{saved}", title,
                         "diff compares two runs of one job; give --allow-different-jobs to compare them anyway")
    table = Thresholds.with_overrides(thresholds)
    with active_thresholds(table):
        comparison = compare_runs(*sides, tolerance)
    summary = json_report.summary_of(comparison.findings, diff=dict(comparison.summary),
                                     verdict_text=json_report.diff_verdict(comparison.findings))
    document = json_report.build(comparison.findings, [], title, summary)
    if table.changed():
        document["thresholds_changed"] = table.changed()
    return RunDiff(base, new, comparison, document, summary, title)
