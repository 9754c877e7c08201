"""perftracker's Python API: the front door every command stands on.

Example:
    In a notebook::

        import perftracker

        run = perftracker.analyze("sample_traces/ddp-gloo-4rank-slow-rank2")
        run.verdict                  # one sentence
        run.findings_frame()         # the findings, ranked, as a DataFrame
        run.view("steps")            # any report view, as a DataFrame
        run.write("out")             # findings.json, tables/, report.html: only when asked

        change = perftracker.diff("runs/before", "runs/after")
        change.verdict, change.findings_frame()

        with perftracker.load("runs/after") as store:   # the loaded tables themselves
            store["steps"]

Promise: `analyze`, `diff`, `load` and `timeline` read their inputs and write nothing (the parsed-trace cache
aside, under `$XDG_CACHE_HOME/perftracker`, unless `cache=False`); results are written only by their `write`
methods. Loading options are keyword arguments named as the fields of
`perftracker.collectors.loading.LoadOptions` (`workers`, `engine`, `ray_address`, `job`, `nccl_profile`,
`sysfs_root`, `sysfs_host`, `comm_kernel_patterns`, `comm_kernel_files`, `progress`, ...), plus `cache`.
Rendering (Jinja, plotly) and the Ray engine are imported only when a page is rendered or `engine="ray"`.
Bad input raises `perftracker.errors.InputError` (its `message` says what, where and what next).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.compare.diff import DEFAULT_TOLERANCE
from perftracker.analyzers.findings import Finding, rank_findings
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.traces.merged_timeline import DEFAULT_MAX_EVENTS, MergedTimeline
from perftracker.collectors.jobs import JobGroup
from perftracker.collectors.loading import LoadOptions, default_cache_dir, load_jobs, load_path
from perftracker.errors import InputError
from perftracker.outputs import (
    DIFF_HTML,
    DIFF_JSON,
    FINDINGS,
    REPORT,
    TABLES,
    TIMELINE,
    ReportNotWritten,
    render_report,
    saved_output,
    write_timeline,
    writing,
)
from perftracker.pipeline import diff_runs, read_run, run_of, timeline_of
from perftracker.results import Run, RunDiff
from perftracker.store import Store

PathLike = str | os.PathLike[str]

__all__ = [
    "DEFAULT_TOLERANCE", "DIFF_HTML", "DIFF_JSON", "FINDINGS", "REPORT", "TABLES", "TIMELINE", "AnalysisOptions", "LoadOptions",
    "ReportNotWritten", "Run", "RunDiff", "analyze", "analyze_jobs", "analyze_store", "diff", "judge", "load",
    "load_options", "read", "render_report", "save_timeline", "timeline", "writing",
]


def load_options(cache: bool | PathLike = True, **fields: Any) -> LoadOptions:
    """The loading options of these keyword arguments.

    Args:
        cache: True: the parsed-trace cache under `$XDG_CACHE_HOME/perftracker` (or ~/.cache/perftracker);
            False: none; a path: that folder.
        **fields: Fields of `LoadOptions` (`workers`, `engine`, `job`, `nccl_profile`, ...).

    Raises:
        TypeError: a keyword that is not a loading option.
    """
    cache_dir = default_cache_dir() if cache is True else None if cache is False else Path(cache)
    for name in ("comm_kernel_patterns", "comm_kernel_files"):
        if name in fields:
            fields[name] = tuple(fields[name] or ())
    known = set(LoadOptions.__dataclass_fields__) - {"cache_dir"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; the loading options are: cache, "
                        + ", ".join(sorted(known)))
    return LoadOptions(cache_dir=cache_dir, **fields)


def load(path: PathLike, **options: Any) -> Store:
    """Load every input under `path` into a `Store` (typed tables, notes, run facts); nothing is analyzed.

    Use it as a context manager: past a size the events are Parquet parts in a temporary folder, removed
    when the `with` block ends (or by `store.close()`).

    Args:
        path: A run directory, a folder of inputs (torch.profiler traces, NCCL logs, ...) or one file.
        **options: Loading options (see `load_options`).

    Raises:
        perftracker.errors.InputError: nothing usable there, or traces of several jobs without `job=`.
    """
    return load_path(Path(path), load_options(**options))


def analyze_store(store: Store, input_path: PathLike = "", *, hta_compat: bool = False,
                  analysis: AnalysisOptions | None = None, timeline: bool = False) -> Run:
    """Analyze an already loaded Store (left open: close it, or load it in a `with` block).

    Args:
        store: What `load` returned.
        input_path: The path to name as the run's input (findings.json's "input", the report's title).
        hta_compat: Use Holistic Trace Analysis' definitions for the breakdown and overlap.
        analysis: The analysis options in full (`hta_compat` is then ignored).
        timeline: Also merge all ranks onto one clock-aligned timeline (`Run.timeline`; written by `Run.write`).
    """
    chosen = analysis if analysis is not None else AnalysisOptions(hta_compat=hta_compat)
    return run_of(Analysis(store, chosen), str(input_path or store.run_info.input), timeline)


def judge(store: Store, analyzers: Sequence[str], analysis: AnalysisOptions | None = None) -> list[Finding]:
    """The findings of only the named analyzers (names of `perftracker.analyzers.registry`, e.g.
    "nccl_config") on a Store, ranked; no root-cause join, no views (`perftracker lint-env` asks this).

    A crashing analyzer becomes a warning finding naming it, as in a full analysis.
    """
    return rank_findings(costed_findings(Analysis(store, analysis), only=list(analyzers)))


def analyze(path: PathLike, *, hta_compat: bool = False, analysis: AnalysisOptions | None = None,
            timeline: bool = False, **options: Any) -> Run:
    """Analyze the inputs under `path`: every analyzer, the root-cause join and every report view, once.

    Args:
        path: A run directory, a folder of torch.profiler traces (one per rank), NCCL logs, counter dumps,
            flight-recorder dumps, job logs, or one file.
        hta_compat: Use Holistic Trace Analysis' definitions for the breakdown and overlap.
        analysis: The analysis options in full (`hta_compat` is then ignored).
        timeline: Also merge all ranks onto one clock-aligned timeline (`Run.timeline`).
        **options: Loading options (see `load_options`: `cache`, `workers`, `engine`, `job`, ...).

    Returns:
        The analyzed run, in memory: nothing is written until `Run.write(out)`.

    Raises:
        perftracker.errors.InputError: nothing usable there, or traces of several jobs without `job=`.
    """
    with load(path, **options) as store:
        return analyze_store(store, path, hta_compat=hta_compat, analysis=analysis, timeline=timeline)


def analyze_jobs(path: PathLike, *, hta_compat: bool = False, analysis: AnalysisOptions | None = None,
                 timeline: bool = False, **options: Any) -> list[tuple[JobGroup | None, Run]]:
    """Each job under `path` analyzed alone (traces of different jobs are never compared), one at a time
    (each job's Store is closed before the next is loaded).

    Returns:
        (the job's group of traces, or None for inputs without traces; its `Run`) per job. With one job,
        that of `analyze`.
    """
    runs: list[tuple[JobGroup | None, Run]] = []
    for group, store in load_jobs(Path(path), load_options(**options)):
        with store:
            runs.append((group, analyze_store(store, path, hta_compat=hta_compat, analysis=analysis,
                                              timeline=timeline)))
    return runs


def read(path: PathLike, *, follow_links: bool = False) -> Run:
    """A saved analysis (the folder `Run.write` or `perftracker analyze -o` wrote, or a run directory holding
    one in perftracker-out/) as a `Run`. Its findings.json and tables/ are read as untrusted input: a table
    that is damaged, foreign or a link leading outside the folder (unless `follow_links`) is left out, and
    `Run.notes` says why.

    Raises:
        perftracker.errors.InputError: no findings.json and tables/ there.
    """
    folder = saved_output(Path(path))
    if folder is None:
        raise InputError("no saved analysis here (findings.json and tables/)", str(path),
                         "run `perftracker analyze <inputs> -o <dir>` first, or analyze the inputs")
    return read_run(folder, follow_links)


def diff(base: PathLike, new: PathLike, *, tolerance: float = DEFAULT_TOLERANCE,
         analysis: AnalysisOptions | None = None, allow_different_jobs: bool = False, **options: Any) -> RunDiff:
    """Compare two runs of one job: what changed beyond the noise of running it twice.

    Args:
        base: The good (earlier) run: inputs to analyze, or a saved analysis (read as it is).
        new: The run to compare with it, in either form.
        tolerance: A significant step-time rise below this fraction is an info, not a warning.
        analysis: The analysis options of a side that is analyzed; their threshold overrides also apply to
            the comparison (diff.json records them).
        allow_different_jobs: Compare runs that look like different jobs (rank counts, ops) instead of refusing.
        **options: Loading options for a side that is analyzed (see `load_options`).

    Returns:
        The comparison, in memory: nothing is written until `RunDiff.write(out)`.

    Raises:
        perftracker.errors.InputError: the two runs look like different jobs (and `allow_different_jobs` is off).
    """
    thresholds = analysis.thresholds if analysis is not None else None
    return diff_runs(_side(Path(base), options, analysis), _side(Path(new), options, analysis), f"{base} -> {new}",
                     tolerance, thresholds, allow_different_jobs)


def _side(path: Path, options: dict[str, Any], analysis: AnalysisOptions | None) -> Run:
    saved = saved_output(path)
    return read_run(saved, bool(options.get("follow_links", False))) if saved is not None \
        else analyze(path, analysis=analysis, **options)


def timeline(path: PathLike, *, ranks: list[int] | None = None, steps: list[int] | None = None,
             max_events: int = DEFAULT_MAX_EVENTS, analysis: AnalysisOptions | None = None,
             **options: Any) -> MergedTimeline:
    """One clock-aligned timeline of all ranks (offsets from collective end times), with the findings of the
    report marked on it; write it with `write_timeline`.

    Args:
        path: The inputs (with torch.profiler traces).
        ranks: The ranks to include (default: all up to 64; beyond, those the findings name and the median).
        steps: The profiler steps to include (default: the last that fit `max_events`).
        max_events: At most this many events.
        analysis: The analysis options (threshold overrides) of the findings marked.
        **options: Loading options (see `load_options`).

    Raises:
        perftracker.errors.InputError: no trace events to merge.
    """
    with load(path, **options) as store:
        return timeline_of(Analysis(store, analysis), str(path), ranks, steps, max_events)


def save_timeline(merged: MergedTimeline, out: PathLike, title: str = "") -> int:
    """Write a merged timeline as a Chrome/Perfetto trace (.json or .json.gz); the number of events written.

    Raises:
        perftracker.errors.OutputError: the file could not be written (nothing half-written is left).
    """
    with writing(Path(out)):
        return write_timeline(merged, Path(out), title)
