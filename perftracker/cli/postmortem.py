"""`perftracker postmortem DIR`: diagnose a finished, failed or hung job from the artifacts it left.

Job logs, flight-recorder dumps, torchelastic error files, NCCL and kernel logs, traces and step files; a
one-line verdict, `--summary` and `--prom` when asked. Exit codes as `analyze`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perftracker import api
from perftracker.cli import options as opt
from perftracker.cli.progress import parsing_progress
from perftracker.cli.voice import fail_on_exit, parse_fail_on, show, terminal, write_and_say
from perftracker.reports.text import headline, prometheus_text, text_summary
from perftracker.rundir import atomic_write_text


def postmortem(
    path: Annotated[Path, typer.Argument(help="Folder with what the job left: output logs, flight-recorder dumps, "
                                         "torchelastic error files, NCCL logs, traces (or a perftracker run "
                                         "directory).")],
    out: Annotated[Path, opt.out_option("Where to write report.html, findings.json and tables/ (keep it outside "
                                    "PATH).")] = Path("perftracker-postmortem"),
    fail_on: opt.FailOn = None,
    summary: Annotated[Path | None, typer.Option("--summary", help="Write a short text summary (chat, ticket).")]
    = None,
    prom: Annotated[Path | None, typer.Option("--prom", help="Write headline metrics as a Prometheus text file "
                                              "(node-exporter textfile collector).")] = None,
    set_threshold: opt.SetThresholds = None,
    thresholds_file: opt.ThresholdsFiles = None,
    follow_links: opt.FollowLinks = False,
) -> None:
    """Post-mortem of a job: which rank hung or failed first, where, and why.

    Exit codes: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on exists.

    Examples:
      perftracker postmortem job-logs/ -o out/
      perftracker postmortem job-logs/ -o out/ --summary summary.txt --prom metrics.prom
    """
    threshold = parse_fail_on(fail_on)
    overrides = opt.threshold_overrides(set_threshold, thresholds_file)
    opt.output_folder(out)
    for file, option in ((summary, "--summary"), (prom, "--prom")):
        if file is not None:
            opt.writable_file(file, option)
    console = terminal()
    with parsing_progress() as progress:
        result = api.analyze(path, cache=False, progress=progress, follow_links=follow_links,
                             analysis=api.AnalysisOptions(thresholds=overrides))
    write_and_say(result, out, partial(_say_verdict, console))
    if summary is not None:
        with api.writing(summary, "--summary"):
            atomic_write_text(summary, text_summary(result.document, str(result.report_path)))
    if prom is not None:
        with api.writing(prom, "--prom"):
            atomic_write_text(prom, prometheus_text(result.document, result.tables))
    raise typer.Exit(fail_on_exit(result.findings, threshold))


def _say_verdict(console: Console, result: api.Run, written: bool) -> None:
    show(console, f"Verdict: {headline(result.document)}")
    if written:
        show(console, f"Report: {result.report_path}")
