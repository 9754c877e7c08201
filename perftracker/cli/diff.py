"""`perftracker diff BASE NEW`: what changed between two runs of a job, beyond the noise of running it twice."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from perftracker.analyzers.compare.diff import DEFAULT_TOLERANCE
from perftracker.analyzers.findings import Severity
from perftracker.cli.options import (
    Engine,
    RayAddress,
    checked_engine,
    out_option,
    quiet_option,
    writable_folder,
)
from perftracker.cli.progress import parsing_progress
from perftracker.cli.voice import EXIT_FINDINGS, add_command, terminal
from perftracker.collectors.loading import LoadOptions, default_cache_dir
from perftracker.errors import UsageError
from perftracker.pipeline import DIFF_HTML, DIFF_JSON, diff_paths
from perftracker.reports.text import printable


def diff(
    base: Annotated[Path, typer.Argument(help="The good (earlier) run: a run directory, a folder of traces, or an "
                                         "analyze output folder (findings.json + tables/).")],
    new: Annotated[Path, typer.Argument(help="The run to compare with it, in any of the same forms.")],
    out: Annotated[Path | None, out_option(f"Where to write {DIFF_JSON} and {DIFF_HTML} (each side's own "
                                           "analysis goes to base/ and new/ under it). Default: only the "
                                           "terminal summary.")] = None,
    fail_on_regression: Annotated[float | None, typer.Option(
        "--fail-on-regression", metavar="PCT", help="Exit 3 when the step time rose by at least PCT percent "
        "beyond the runs' noise (for CI).")] = None,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", metavar="PCT", help="A significant step-time rise below PCT percent is an info, not a "
        "warning.")] = 100 * DEFAULT_TOLERANCE,
    no_cache: Annotated[bool, typer.Option("--no-cache", metavar="", help="Do not read or write the parsed-trace cache.")]
    = False,
    engine: Engine = "local",
    ray_address: RayAddress = None,
    quiet: Annotated[bool, quiet_option("Print only the verdict line.")] = False,
    allow_different_jobs: Annotated[bool, typer.Option("--allow-different-jobs", metavar="", help="Compare runs "
                                                       "that look like different jobs (ranks, ops).")] = False,
) -> None:
    """Compare two runs: step time, ops and kernels per step, the rank(s) that changed, settings, findings.

    Runs that look like different jobs (rank counts, ops) are refused (exit 2) unless --allow-different-jobs.

    Exit codes: 0 compared, 2 bad input or usage, 3 --fail-on-regression exceeded.
    """
    if fail_on_regression is not None and fail_on_regression < 0:
        raise UsageError(f"--fail-on-regression {fail_on_regression}: must be a percentage >= 0", "diff",
                         "e.g. --fail-on-regression 5")
    if out is not None:
        writable_folder(out)
    checked = checked_engine(engine)
    console = terminal()
    with parsing_progress(quiet) as progress:
        options = LoadOptions(cache_dir=None if no_cache else default_cache_dir(), progress=progress,
                              engine=checked, ray_address=ray_address or "")
        if out is None:
            with tempfile.TemporaryDirectory(prefix="perftracker-diff-") as scratch:
                result, _ = diff_paths(base, new, Path(scratch), options, tolerance / 100.0,
                                       allow_different_jobs)
        else:
            result, _ = diff_paths(base, new, out, options, tolerance / 100.0, allow_different_jobs)
    loud = [f for f in result.findings if f.severity >= Severity.WARNING]
    regressed = (fail_on_regression is not None and result.regression_significant
                 and result.step_change * 100.0 >= fail_on_regression)
    verdict = (f"{len(loud)} change(s) beyond the runs' noise. Top: {loud[0].title}" if loud
               else "No change beyond the noise of running the same job twice.")
    if regressed and not loud:  # the verdict agrees with the exit code it comes with
        verdict = (f"Step time {100 * result.step_change:+.0f}%, beyond the runs' noise and at or above "
                   f"--fail-on-regression {fail_on_regression:g}%.")
    console.print(printable(verdict), highlight=False, markup=False)
    if not quiet:
        for f in result.findings:
            console.print(f"  [{f.severity.label}] {printable(f.title)}", highlight=False, markup=False)
        if out is not None:
            console.print(f"Diff: {out / DIFF_HTML}  ({out / DIFF_JSON})", highlight=False, markup=False)
    raise typer.Exit(EXIT_FINDINGS if regressed else 0)


def register(app: typer.Typer) -> None:
    add_command(app, "diff", diff)
