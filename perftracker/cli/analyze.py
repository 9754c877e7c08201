"""`perftracker analyze PATH -o OUT`: load traces / step files, run the analyzers, write the report."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from perftracker.analyzers.findings import Finding, Severity
from perftracker.collectors.loading import LoadOptions, default_cache_dir
from perftracker.errors import UsageError
from perftracker.pipeline import analyze_path
from perftracker.reports.text import print_summary
from perftracker.rundir import host_name

EXIT_FINDINGS = 3


def fail_on_exit(findings: list[Finding], fail_on: str | None) -> int:
    """Exit code for --fail-on: 3 when a finding at or above the level exists, else 0."""
    if not fail_on:
        return 0
    try:
        level = Severity.parse(fail_on)
    except ValueError as exc:
        raise UsageError(str(exc), "--fail-on") from None
    return EXIT_FINDINGS if any(f.severity >= level for f in findings) else 0


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze(
        path: Path = typer.Argument(..., help="A run directory, a folder of torch.profiler traces (.json/.json.gz, "
                                    "one per rank), or one trace file."),
        out: Path = typer.Option(Path("perftracker-out"), "--out", "-o", help="Where to write report.html, "
                                 "findings.json and tables/."),
        fail_on: str | None = typer.Option(None, "--fail-on", help="Exit 3 when a finding at or above this "
                                              "severity exists (warning or critical): for CI gates and job hooks."),
        hta_compat: bool = typer.Option(False, "--hta-compat", help="Use Holistic Trace Analysis' definitions for "
                                        "the breakdown and overlap (drop the last step; overlapped communication "
                                        "counts as compute)."),
        comm_kernel: list[str] = typer.Option([], "--comm-kernel", help="Regex of extra GPU kernel names that are "
                                              "communication (custom collectives); repeatable."),
        profile: str | None = typer.Option(None, "--profile", help="NCCL platform profile for the configuration "
                                              "rules: a shipped name (generic, pai-lingjun) or a JSON file."),
        sysfs_root: Path | None = typer.Option(None, "--sysfs-root", help="Check NCCL settings against this "
                                                  "node's RDMA/network sysfs (e.g. /sys) when analyzing on the node."),
        no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the parsed-trace cache."),
        workers: int = typer.Option(0, "--workers", help="Parallel parser processes (0: one per CPU)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the verdict line."),
    ) -> None:
        """Analyze traces and step files; print the verdict and ranked findings; write the report.

        Exit codes: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on exists.
        """
        if fail_on:
            fail_on_exit([], fail_on)  # validate early
        options = LoadOptions(comm_kernel_patterns=tuple(comm_kernel),
                              cache_dir=None if no_cache else default_cache_dir(), workers=workers,
                              nccl_profile=profile, sysfs_root=sysfs_root,
                              sysfs_host=host_name() if sysfs_root is not None else "")
        result = analyze_path(path, out, options, hta_compat=hta_compat)
        console = Console()
        if quiet:
            console.print(result.document["summary"]["verdict"], highlight=False, markup=False)
        else:
            print_summary(console, result.findings, result.report_path,
                          coverage=result.document["summary"].get("coverage"))
        raise typer.Exit(fail_on_exit(result.findings, fail_on))
