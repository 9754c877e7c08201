"""`perftracker analyze PATH -o OUT`: load traces / step files, run the analyzers, write the report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perftracker.cli.options import FailOn, nccl_profile_option, out_option, quiet_option, sysfs_root_option
from perftracker.cli.voice import add_command, fail_on_exit, parse_fail_on
from perftracker.collectors.loading import LoadOptions, default_cache_dir
from perftracker.pipeline import analyze_path
from perftracker.reports.text import print_summary
from perftracker.rundir import host_name


def analyze(
    path: Annotated[Path, typer.Argument(help="A run directory, a folder of torch.profiler traces (.json/.json.gz, "
                                         "one per rank), or one trace file.")],
    out: Annotated[Path, out_option("Where to write report.html, findings.json and tables/.")]
    = Path("perftracker-out"),
    fail_on: FailOn = None,
    hta_compat: Annotated[bool, typer.Option("--hta-compat", help="Use Holistic Trace Analysis' definitions for "
                                             "the breakdown and overlap (drop the last step; overlapped "
                                             "communication counts as compute).")] = False,
    comm_kernel: Annotated[list[str] | None, typer.Option("--comm-kernel", help="Regex of extra GPU kernel names "
                                                          "that are communication (custom collectives); "
                                                          "repeatable.")] = None,
    profile: Annotated[str | None, nccl_profile_option("NCCL platform profile for the configuration rules: a "
                                                       "shipped name (generic, pai-lingjun) or a JSON file.")]
    = None,
    sysfs_root: Annotated[Path | None, sysfs_root_option("Check NCCL settings against this node's RDMA/network "
                                                         "sysfs (e.g. /sys) when analyzing on the node.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the parsed-trace cache.")]
    = False,
    workers: Annotated[int, typer.Option("--workers", help="Parallel parser processes (0: one per CPU).")] = 0,
    quiet: Annotated[bool, quiet_option("Print only the verdict line.")] = False,
) -> None:
    """Analyze traces and step files; print the verdict and ranked findings; write the report.

    Exit codes: 0 ran, 2 bad input or usage, 3 a finding at or above --fail-on exists.
    """
    threshold = parse_fail_on(fail_on)
    options = LoadOptions(comm_kernel_patterns=tuple(comm_kernel or ()),
                          cache_dir=None if no_cache else default_cache_dir(), workers=workers,
                          nccl_profile=profile, sysfs_root=sysfs_root,
                          sysfs_host=host_name() if sysfs_root is not None else "")
    result = analyze_path(path, out, options, hta_compat=hta_compat)
    console = Console()
    if quiet:
        console.print(result.document["summary"]["verdict"], highlight=False, markup=False)
    else:
        print_summary(console, result.findings, result.report_path,
                      coverage=result.document["summary"].get("coverage"),
                      synthetic=result.document["summary"].get("synthetic_inputs"))
    raise typer.Exit(fail_on_exit(result.findings, threshold))


def register(app: typer.Typer) -> None:
    add_command(app, "analyze", analyze)
