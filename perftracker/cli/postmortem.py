"""`perftracker postmortem DIR`: diagnose a finished, failed or hung job from the artifacts it left.

Promise: analyzes a folder collected by any means (Slurm epilogue, Kubernetes pod logs, a copied
folder, or the run directory of `perftracker run`): job output logs, flight-recorder dumps,
torchelastic error files, NCCL logs, kernel logs, traces and step files. It prints a one-line verdict
and the report path, writes `--summary` (chat/ticket text) and `--prom` (Prometheus text file) when
asked. Exit codes as `analyze`: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from perftracker.cli.analyze import fail_on_exit
from perftracker.collectors.loading import LoadOptions
from perftracker.pipeline import analyze_path
from perftracker.reports.summary import headline, prometheus_text, text_summary
from perftracker.rundir import atomic_write_text


def register(app: typer.Typer) -> None:
    @app.command("postmortem")
    def postmortem(
        path: Path = typer.Argument(..., help="Folder with what the job left: output logs, flight-recorder dumps, "
                                    "torchelastic error files, NCCL logs, traces (or a perftracker run directory)."),
        out: Path = typer.Option(Path("perftracker-postmortem"), "--out", "-o", help="Where to write report.html, "
                                 "findings.json and tables/ (keep it outside PATH)."),
        fail_on: str | None = typer.Option(None, "--fail-on", help="Exit 3 when a finding at or above this severity "
                                              "exists (warning or critical)."),
        summary: Path | None = typer.Option(None, "--summary", help="Write a short text summary (chat, ticket)."),
        prom: Path | None = typer.Option(None, "--prom", help="Write headline metrics as a Prometheus text file "
                                         "(node-exporter textfile collector)."),
    ) -> None:
        """Post-mortem of a job: which rank hung or failed first, where, and why.

        Exit codes: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on exists.
        """
        if fail_on:
            fail_on_exit([], fail_on)  # validate early
        result = analyze_path(path, out, LoadOptions(cache_dir=None))
        console = Console()
        console.print(f"Verdict: {headline(result.document)}", highlight=False, markup=False)
        console.print(f"Report: {result.report_path}", highlight=False, markup=False)
        if summary is not None:
            atomic_write_text(summary, text_summary(result.document, str(result.report_path)))
        if prom is not None:
            atomic_write_text(prom, prometheus_text(result.document, result.tables))
        raise typer.Exit(fail_on_exit(result.findings, fail_on))
