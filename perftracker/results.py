"""What the API hands back: one analyzed run (`Run`) and one comparison of two runs (`RunDiff`).

Each holds its verdict, ranked findings, notes, summary and report views in memory; nothing is written until
`write(out)`, which writes each file then renames it (a failure is an OutputError naming the file;
`ReportNotWritten` carries the finished run). In a notebook a run shows its verdict and findings as a table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from perftracker import output_dir
from perftracker.analyzers.compare.diff import RunComparison
from perftracker.analyzers.findings import Finding, safe_evidence
from perftracker.errors import OutputError
from perftracker.output_names import DIFF_HTML, DIFF_JSON, FINDINGS, REPORT, TABLES, TIMELINE
from perftracker.outputs import render_html, writing
from perftracker.redaction import safe_frame, safe_tables, safe_text
from perftracker.reports import json_report
from perftracker.reports.json_report import Summary
from perftracker.reports.timeline_trace import write_trace
from perftracker.store import LoadNote, RunInfo, Store

if TYPE_CHECKING:
    from perftracker.analyzers.traces.merged_timeline import MergedTimeline

FINDING_COLUMNS = ("id", "severity", "analyzer", "title", "ranks", "hosts", "seconds_per_step", "share_of_step",
                   "confidence", "recommendation")


class _Judged:
    """What a run and a comparison share: the verdict their summary says, their findings as a table, and how a
    notebook shows them."""

    summary: Summary
    if TYPE_CHECKING:  # a run's field, a comparison's property
        @property
        def findings(self) -> list[Finding]: ...

    @property
    def verdict(self) -> str:
        """The one-sentence verdict: a run's first actionable finding (or what was judged healthy), a comparison's
        `perftracker.reports.json_report.diff_verdict`."""
        return self.summary.verdict

    def findings_frame(self) -> pd.DataFrame:
        """The findings (a comparison's: its changes) as a DataFrame, one row each in the ranked order: id, severity
        (info, warning, critical), analyzer, title, ranks, hosts, cost (seconds per step, share of the step),
        confidence and recommendation."""
        rows = [{"id": f.id, "severity": f.severity.label, "analyzer": f.analyzer, "title": f.title,
                 "ranks": list(f.ranks), "hosts": list(f.hosts), "seconds_per_step": float(f.cost.seconds_per_step),
                 "share_of_step": float(f.cost.share_of_step), "confidence": f.confidence,
                 "recommendation": f.recommendation} for f in self.findings]
        return pd.DataFrame(rows, columns=list(FINDING_COLUMNS))

    def _repr_html_(self) -> str:
        from perftracker.reports.templating import run_html

        return run_html(self.verdict, self.findings)


@dataclass
class Run(_Judged):
    """One analyzed run: its verdict, findings and report views, in memory until `write` is called.

    Attributes:
        input: The path that was analyzed, as it was given.
        findings: The findings, ranked (critical first, then by cost per step, then by confidence).
        tables: Every report view by name (`perftracker.analyzers.views.REPORT_VIEWS`), as DataFrames.
        notes: What the loaders and the views want the user to know about the inputs.
        document: The findings.json document (schema of `perftracker.reports.json_report`).
        summary: Its summary, typed (`json_report.Summary`: verdict, counts, costs, the run's facts).
        run_info: What the loaders learned about the run (manifest, process groups, ...).
        timeline: The merged, clock-aligned timeline of all ranks, when it was asked for.
        out_dir: Where the run was written (by `write`, or the saved output it was read from); None before.
        store: The Store it was analyzed from (closed: its tables stay, events it had spilled to disk are
            gone); None for a run read from a saved output.
    """

    input: str
    findings: list[Finding]
    tables: dict[str, pd.DataFrame]
    notes: list[LoadNote]
    document: dict[str, Any]
    summary: Summary = field(repr=False)
    run_info: RunInfo = field(default_factory=RunInfo, repr=False)
    timeline: MergedTimeline | None = field(default=None, repr=False)
    out_dir: Path | None = None
    store: Store | None = field(default=None, repr=False, compare=False)

    @property
    def report_path(self) -> Path:
        """Where report.html is (or will be) in `out_dir` (the current folder's before `write`)."""
        return (self.out_dir or Path(".")) / REPORT

    def view(self, name: str) -> pd.DataFrame:
        """The report view `name` (e.g. "steps", "breakdown", "kernels", "lateness").

        Raises:
            KeyError: no view of that name; the message lists the names there are.
        """
        if name not in self.tables:
            raise KeyError(f"no view {name!r}; the views are: {', '.join(self.tables)}")
        return self.tables[name]

    def write(self, out: str | Path) -> Path:
        """Write findings.json, tables/<view>.parquet and report.html (and timeline.json.gz when the run holds
        a timeline) into folder `out`, created if needed. Returns the path of report.html.

        Raises:
            ReportNotWritten: a file could not be written (it names the file; what was
                written before it is whole).
        """
        folder, written = Path(out), []
        try:
            with output_dir.claimed(folder) as claim:  # one writer per folder; a planted link is replaced, never followed
                claim.check(FINDINGS, REPORT, TIMELINE)  # nothing perftracker did not write is in the way
                claim.made_from, claim.command = str(self.input), "analyze"
                tables = safe_tables(self.tables)
                with writing(folder / TABLES):
                    output_dir.replace_tables(tables, folder / TABLES, claim)
                written.append(f"{TABLES}/")
                with writing(folder / FINDINGS):
                    json_report.write(folder / FINDINGS, self.document)
                    claim.wrote(FINDINGS)
                written.append(FINDINGS)
                if self.timeline is not None:
                    with writing(folder / TIMELINE):
                        write_trace(folder / TIMELINE, self.timeline, self.input)
                        claim.wrote(TIMELINE)
                    written.append(TIMELINE)
                else:  # an earlier run's timeline is not this run's
                    output_dir.remove_stale(folder / TIMELINE, claim)
                with writing(folder / REPORT):
                    render_html(folder, tables, self.findings, self.notes, self.input, self.summary)
                    claim.wrote(REPORT)
        except OutputError as exc:
            raise ReportNotWritten(exc, self, written) from None
        self.out_dir = folder
        return self.report_path

    def __repr__(self) -> str:
        return f"Run({self.input!r}: {self.verdict} [{len(self.findings)} findings])"


class ReportNotWritten(OutputError):
    """The analysis finished, but its outputs could not be written: `result` is the finished analysis (a
    `Run`: findings, document, tables), for the verdict to be said all the same."""

    def __init__(self, cause: OutputError, result: Run, written: list[str]) -> None:
        kept = f" ({' and '.join(written)} written before it)" if written else ""
        super().__init__(cause.what, cause.where, cause.hint + kept)
        self.result = result


@dataclass
class RunDiff(_Judged):
    """A comparison of two runs of one job: what changed beyond the noise of running it twice.

    Attributes:
        base: The earlier (good) run.
        new: The run compared with it.
        comparison: The comparison's tables: `ops` (op time per step on each side), `ranks` (per-rank
            changes), `step_change` (new / base median step time - 1), `regression_significant`, `summary`.
        document: The diff.json document (findings.json's schema).
        summary: Its summary, typed (`json_report.Summary`; the comparison's figures in `diff`).
        out_dir: Where it was written by `write`; None before.
    """

    base: Run
    new: Run
    comparison: RunComparison
    document: dict[str, Any]
    summary: Summary
    title: str
    out_dir: Path | None = None

    @property
    def findings(self) -> list[Finding]:
        """The changes, ranked: the step time, ranks that changed, ops, settings, findings that came or went."""
        return self.comparison.findings

    @property
    def step_change(self) -> float:
        """New / base median step time - 1 (NaN without steps on both sides)."""
        return self.comparison.step_change

    @property
    def regression_significant(self) -> bool:
        """Whether the new run's steps are slower beyond the runs' noise."""
        return self.comparison.regression_significant

    def write(self, out: str | Path) -> Path:
        """Write diff.json and diff.html into folder `out` (each side that was analyzed, not read from a saved
        output, into `out/base` and `out/new`). Returns the path of diff.html.

        Raises:
            perftracker.errors.OutputError: a file could not be written (it names the file).
        """
        folder, reports = Path(out), {}
        with output_dir.claimed(folder) as claim:
            claim.check(DIFF_JSON, DIFF_HTML)
            claim.command = claim.command or "diff"
            for label, side in (("base", self.base), ("new", self.new)):
                if side.out_dir is None:
                    side.write(folder / label)
                if side.out_dir is not None and (side.out_dir / REPORT).is_file():
                    reports[label] = Path(os.path.relpath(side.out_dir / REPORT, folder)).as_posix()
            with writing(folder / DIFF_JSON):
                json_report.write(folder / DIFF_JSON, self.document)
                claim.wrote(DIFF_JSON)
            with writing(folder / DIFF_HTML):
                from perftracker.reports.html import render_diff

                render_diff(folder / DIFF_HTML, self.findings, safe_frame(self.comparison.ops),
                                 safe_frame(self.comparison.ranks), safe_evidence(self.comparison.summary),
                                 title=safe_text(f"perftracker diff: {self.title}"), verdict=self.verdict,
                                 side_reports=reports)
                claim.wrote(DIFF_HTML)
        self.out_dir = folder
        return folder / DIFF_HTML

    def __repr__(self) -> str:
        return f"RunDiff({self.title!r}: {self.verdict})"
