"""perftracker's Python API: the front door every command stands on.

`analyze`, `diff`, `load` and `timeline` read their inputs and write nothing (the parsed-trace cache aside);
results are written only by their `write` methods. Options are typed keywords, checked before anything is
loaded (`option_checks`). Design and an example: docs/internals/core.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict, Unpack

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.analysis import AnalysisOptions as AnalysisOptions
from perftracker.analyzers.compare.diff import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
from perftracker.analyzers.findings import Finding, rank_findings
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.traces.merged_timeline import DEFAULT_MAX_EVENTS, MergedTimeline
from perftracker.collectors.jobs import JobGroup
from perftracker.collectors.loading import LoadOptions as LoadOptions
from perftracker.collectors.loading import default_cache_dir, load_jobs, load_path
from perftracker.errors import InputError, UsageError
from perftracker.option_checks import boolean, finite, selection, whole
from perftracker.option_checks import path as checked_path
from perftracker.outputs import render_report as render_report
from perftracker.outputs import saved_output
from perftracker.outputs import writing as writing
from perftracker.pipeline import diff_runs, read_run, run_of, timeline_of
from perftracker.reports.timeline_trace import write_trace
from perftracker.results import ReportNotWritten as ReportNotWritten
from perftracker.results import Run as Run
from perftracker.results import RunDiff as RunDiff
from perftracker.store import Store

PathLike = str | os.PathLike[str]


class LoadKeywords(TypedDict, total=False):
    """The loading options, as keyword arguments of `load`, `analyze`, `analyze_jobs`, `diff` and `timeline`."""

    cache: bool | PathLike  # True: the parsed-trace cache under $XDG_CACHE_HOME/perftracker; False: none; a folder
    comm_kernel_patterns: Sequence[str]  # regular expressions of communication kernels (family "custom")
    comm_kernel_files: Sequence[PathLike]  # files of communication kernel families (comm_kernels format)
    workers: int  # parser processes (0: one per CPU)
    engine: str  # "local" or "ray"
    ray_address: str  # the Ray cluster of engine="ray" ("": one started on this machine)
    nccl_profile: str | None  # the NCCL platform profile (shipped name or file)
    sysfs_root: PathLike | None  # this node's /sys (or a copy) for the NCCL/RDMA rules
    sysfs_host: str  # the node whose sysfs that is
    nsys_step_range: str  # the NVTX range that marks a step in Nsight Systems exports
    follow_links: bool  # read files that symlinks lead to outside the input
    job: str | None  # the one job to load where the traces are of several
    spill_events_from: int  # from this many events on, the events are Parquet parts on disk
    progress: Callable[[int, int], None] | None  # called with (files parsed, files in all)

# The public names are listed once, in perftracker/__init__.py; the commands also use the names re-exported below.


def load_options(**options: Unpack[LoadKeywords]) -> LoadOptions:
    """The loading options of these keyword arguments, every value checked (nothing is loaded).

    Raises:
        TypeError: a keyword that is not a loading option.
        perftracker.errors.UsageError: a value of the wrong kind or out of range.
    """
    fields: dict[str, object] = dict(options)
    known = set(LoadOptions.__dataclass_fields__) - {"cache_dir"}
    unknown = sorted(set(fields) - known - {"cache"})
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; the loading options are: cache, "
                        + ", ".join(sorted(known)))
    cache = fields.pop("cache", True)
    cache_dir = default_cache_dir() if cache is True else None if cache is False else checked_path(cache, "cache")
    return LoadOptions(cache_dir=cache_dir, **fields)  # type: ignore[arg-type]  # each field checked by LoadOptions


def load(path: PathLike, **options: Unpack[LoadKeywords]) -> Store:
    """Load every input under `path` into a `Store` (typed tables, notes, run facts); nothing is analyzed.

    Use it as a context manager: past a size the events are Parquet parts in a temporary folder, removed
    when the `with` block ends (or by `store.close()`).

    Args:
        path: A run directory, a folder of inputs (torch.profiler traces, NCCL logs, ...) or one file.
        **options: Loading options (see `load_options`).

    Raises:
        perftracker.errors.InputError: nothing usable there, or traces of several jobs without `job=`.
    """
    return load_path(checked_path(path, "path"), load_options(**options))


def analyze_store(store: Store, input_path: PathLike = "", *, hta_compat: bool = False,
                  analysis: AnalysisOptions | None = None, timeline: bool = False) -> Run:
    """Analyze an already loaded Store (what `load` returned; left open: close it, or load it in a `with` block)
    as `analyze` does; `input_path` is the path to name as the run's input (findings.json's "input", the report's
    title)."""
    chosen = _analysis_options(hta_compat, analysis)
    return run_of(Analysis(store, chosen), str(input_path or store.run_info.input), timeline)


def judge(store: Store, analyzers: Sequence[str], analysis: AnalysisOptions | None = None) -> list[Finding]:
    """The findings of only the named analyzers (names of `perftracker.analyzers.registry`, e.g.
    "nccl_config") on a Store, ranked; no root-cause join, no views (`perftracker lint-env` asks this).

    A crashing analyzer becomes a warning finding naming it, as in a full analysis.
    """
    return rank_findings(costed_findings(Analysis(store, analysis), only=list(analyzers)))


def analyze(path: PathLike, *, hta_compat: bool = False, analysis: AnalysisOptions | None = None,
            timeline: bool = False, **options: Unpack[LoadKeywords]) -> Run:
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
    chosen, loading = _analysis_options(hta_compat, analysis), load_options(**options)
    boolean(timeline, "timeline")
    with load_path(Path(path), loading) as store:
        return analyze_store(store, path, analysis=chosen, timeline=timeline)


def analyze_jobs(path: PathLike, *, hta_compat: bool = False, analysis: AnalysisOptions | None = None,
                 timeline: bool = False, **options: Unpack[LoadKeywords]) -> list[tuple[JobGroup | None, Run]]:
    """Each job under `path` analyzed alone as `analyze` does (traces of different jobs are never compared), one
    at a time (each job's Store is closed before the next is loaded): (the job's group of traces, or None for
    inputs without traces; its `Run`) per job. With one job, that of `analyze`."""
    chosen, loading = _analysis_options(hta_compat, analysis), load_options(**options)
    boolean(timeline, "timeline")
    runs: list[tuple[JobGroup | None, Run]] = []
    for group, store in load_jobs(Path(path), loading):
        with store:
            runs.append((group, analyze_store(store, path, analysis=chosen, timeline=timeline)))
    return runs


def read(path: PathLike, *, follow_links: bool = False) -> Run:
    """A saved analysis (the folder `Run.write` or `perftracker analyze -o` wrote, or a run directory holding
    one in perftracker-out/) as a `Run`. Its findings.json and tables/ are read as untrusted input: a table
    that is damaged, foreign or a link leading outside the folder (unless `follow_links`) is left out, and
    `Run.notes` says why.

    Raises:
        perftracker.errors.InputError: no findings.json and tables/ there.
    """
    folder = saved_output(checked_path(path, "path"))
    boolean(follow_links, "follow_links")
    if folder is None:
        raise InputError("no saved analysis here (findings.json and tables/)", str(path),
                         "run `perftracker analyze <inputs> -o <dir>` first, or analyze the inputs")
    return read_run(folder, follow_links)


def diff(base: PathLike, new: PathLike, *, tolerance: float = DEFAULT_TOLERANCE,
         analysis: AnalysisOptions | None = None, allow_different_jobs: bool = False,
         **options: Unpack[LoadKeywords]) -> RunDiff:
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
    chosen, loading = _analysis_options(False, analysis), load_options(**options)
    tolerance = finite(tolerance, "tolerance")
    boolean(allow_different_jobs, "allow_different_jobs")
    before, after = (_side(checked_path(side, name), loading, chosen) for side, name in ((base, "base"), (new, "new")))
    return diff_runs(before, after, f"{base} -> {new}", tolerance, chosen.thresholds, allow_different_jobs)


def _side(path: Path, loading: LoadOptions, analysis: AnalysisOptions) -> Run:
    saved = saved_output(path)
    if saved is not None:
        return read_run(saved, loading.follow_links)
    with load_path(path, loading) as store:
        return analyze_store(store, path, analysis=analysis)


def _analysis_options(hta_compat: object, analysis: object) -> AnalysisOptions:
    """The analysis options of a call, checked (an `AnalysisOptions` checks its own fields when made)."""
    if analysis is None:
        return AnalysisOptions(hta_compat=boolean(hta_compat, "hta_compat"))
    if not isinstance(analysis, AnalysisOptions):
        raise UsageError(f"{type(analysis).__name__} is not an AnalysisOptions", "analysis",
                         "give perftracker.AnalysisOptions(...), or None")
    return analysis


def timeline(path: PathLike, *, ranks: list[int] | None = None, steps: list[int] | None = None,
             max_events: int = DEFAULT_MAX_EVENTS, analysis: AnalysisOptions | None = None,
             **options: Unpack[LoadKeywords]) -> MergedTimeline:
    """One clock-aligned timeline of all ranks (offsets from collective end times), with the findings of the
    report marked on it; write it with `save_timeline`.

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
    chosen, loading = _analysis_options(False, analysis), load_options(**options)
    ranks, steps = selection(ranks, "ranks"), selection(steps, "steps")
    max_events = whole(max_events, "max_events", 1)
    with load_path(checked_path(path, "path"), loading) as store:
        return timeline_of(Analysis(store, chosen), str(path), ranks, steps, max_events)


def save_timeline(merged: MergedTimeline, out: PathLike, title: str = "") -> int:
    """Write a merged timeline as a Chrome/Perfetto trace (.json or .json.gz); the number of events written.

    Raises:
        perftracker.errors.OutputError: the file could not be written (nothing half-written is left).
    """
    with writing(Path(out)):
        return write_trace(Path(out), merged, title)
