"""`perftracker diff BASE NEW`: what changed between two runs of a job, beyond the noise of running it twice."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perftracker import api
from perftracker.analyzers.findings import Severity
from perftracker.cli import options as opt
from perftracker.cli.progress import parsing_progress
from perftracker.cli.voice import EXIT_FINDINGS, show, terminal
from perftracker.errors import UsageError
from perftracker.output_names import DIFF_HTML, DIFF_JSON


def diff(
    base: Annotated[Path, typer.Argument(help="The good (earlier) run: a run directory, a folder of traces, or an "
                                         "analyze output folder (findings.json + tables/).")],
    new: Annotated[Path, typer.Argument(help="The run to compare with it, in any of the same forms.")],
    out: Annotated[Path | None, opt.out_option(f"Where to write {DIFF_JSON} and {DIFF_HTML} (each side's own "
                                           "analysis goes to base/ and new/ under it). Default: only the "
                                           "terminal summary.")] = None,
    fail_on_regression: Annotated[float | None, typer.Option(
        "--fail-on-regression", metavar="PCT", help="Exit 3 when the step time rose by at least PCT percent "
        "beyond the runs' noise (for CI).")] = None,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", metavar="PCT", help="A significant step-time rise below PCT percent is an info, not a "
        "warning.")] = 100 * api.DEFAULT_TOLERANCE,
    no_cache: opt.NoCache = False,
    engine: opt.Engine = "local",
    ray_address: opt.RayAddressNoWorkers = None,
    quiet: opt.QuietVerdict = False,
    set_threshold: opt.SetThresholds = None,
    thresholds_file: opt.ThresholdsFiles = None,
    allow_different_jobs: Annotated[bool, typer.Option("--allow-different-jobs", help="Compare runs "
                                                       "that look like different jobs (ranks, ops).")] = False,
    follow_links: opt.FollowLinks = False,
) -> None:
    """Compare two runs: step time, ops and kernels per step, the rank(s) that changed, settings, findings.

    Runs that look like different jobs (rank counts, ops) are refused (exit 2) unless --allow-different-jobs.

    Exit codes: 0 compared, 2 bad input or usage, 3 --fail-on-regression exceeded.

    Examples:
      perftracker diff good-run/ new-run/
      perftracker diff good-run/ new-run/ -o cmp/ --fail-on-regression 5
    """
    if fail_on_regression is not None and fail_on_regression < 0:
        raise UsageError(f"--fail-on-regression {fail_on_regression}: must be a percentage >= 0", "diff",
                         "e.g. --fail-on-regression 5")
    overrides = opt.threshold_overrides(set_threshold, thresholds_file)
    if out is not None:
        opt.output_folder(out)
    checked = opt.checked_engine(engine)
    console = terminal()
    with parsing_progress(quiet) as progress:
        result = api.diff(base, new, tolerance=tolerance / 100.0, cache=not no_cache, progress=progress,
                          engine=checked, ray_address=ray_address or '', follow_links=follow_links,
                          analysis=api.AnalysisOptions(thresholds=overrides),
                          allow_different_jobs=allow_different_jobs)
    regressed = (fail_on_regression is not None and result.regression_significant
                 and result.step_change * 100.0 >= fail_on_regression)
    verdict = result.verdict
    loud = any(f.severity >= Severity.WARNING for f in result.findings)
    if regressed and not loud:  # the verdict agrees with the exit code it comes with
        verdict = (f"Step time {100 * result.step_change:+.0f}%, beyond the runs' noise and at or above "
                   f"--fail-on-regression {fail_on_regression:g}%.")
    show(console, verdict)
    if not quiet:
        for f in result.findings:
            show(console, f"  [{f.severity.label}] {f.title}")
    if out is not None:
        result.write(out)  # an OutputError (exit 2) naming the file that could not be written, after the verdict
        if not quiet:
            show(console, f"Diff: {out / DIFF_HTML}  ({out / DIFF_JSON})")
    raise typer.Exit(EXIT_FINDINGS if regressed else 0)
