"""`perftracker postmortem DIR`: diagnose a finished, failed or hung job from the artifacts it left.

Promise: analyzes a folder collected by any means (Slurm epilogue, Kubernetes pod logs, a copied
folder, or the run directory of `perftracker run`): job output logs, flight-recorder dumps,
torchelastic error files, NCCL logs, kernel logs, traces and step files. It prints a one-line verdict
and the report path, writes `--summary` (chat/ticket text) and `--prom` (Prometheus text file) when
asked. Exit codes as `analyze`: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perftracker.cli.options import FailOn, out_option
from perftracker.cli.voice import add_command, fail_on_exit, parse_fail_on
from perftracker.collectors.loading import LoadOptions
from perftracker.pipeline import analyze_path
from perftracker.reports.summary import headline, prometheus_text, text_summary
from perftracker.rundir import atomic_write_text


def postmortem(
    path: Annotated[Path, typer.Argument(help="Folder with what the job left: output logs, flight-recorder dumps, "
                                         "torchelastic error files, NCCL logs, traces (or a perftracker run "
                                         "directory).")],
    out: Annotated[Path, out_option("Where to write report.html, findings.json and tables/ (keep it outside "
                                    "PATH).")] = Path("perftracker-postmortem"),
    fail_on: FailOn = None,
    summary: Annotated[Path | None, typer.Option("--summary", help="Write a short text summary (chat, ticket).")]
    = None,
    prom: Annotated[Path | None, typer.Option("--prom", help="Write headline metrics as a Prometheus text file "
                                              "(node-exporter textfile collector).")] = None,
) -> None:
    """Post-mortem of a job: which rank hung or failed first, where, and why.

    Exit codes: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on exists.
    """
    threshold = parse_fail_on(fail_on)
    result = analyze_path(path, out, LoadOptions(cache_dir=None))
    console = Console()
    console.print(f"Verdict: {headline(result.document)}", highlight=False, markup=False)
    console.print(f"Report: {result.report_path}", highlight=False, markup=False)
    if summary is not None:
        atomic_write_text(summary, text_summary(result.document, str(result.report_path)))
    if prom is not None:
        atomic_write_text(prom, prometheus_text(result.document, result.tables))
    raise typer.Exit(fail_on_exit(result.findings, threshold))


def register(app: typer.Typer) -> None:
    add_command(app, "postmortem", postmortem)
