"""`perftracker lint-env`: a pre-flight check of a job's NCCL configuration before launch.

Reads an env file, a live process's environment or the current one, adds the node's sysfs facts and a platform
profile, runs the `nccl_config` rules and prints the findings. Exit 0 clean, 3 at or above `--fail-on`, 2 bad input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from perftracker import api
from perftracker.analyzers.findings import Finding, Severity
from perftracker.cli.options import fail_on_option, nccl_profile_option, sysfs_root_option
from perftracker.cli.voice import fail_on_exit, parse_fail_on, terminal
from perftracker.collectors.counters.sysfs import read_sysfs
from perftracker.collectors.env import env_file_frame, env_rows, process_env_frame
from perftracker.collectors.nccl.profiles import load_profile
from perftracker.errors import UsageError
from perftracker.redaction import safe_env
from perftracker.reports.text import printable
from perftracker.rundir import host_name
from perftracker.store import RunInfo, Store
from perftracker.store.schema import conform

_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def lint(env_file: Path | None = None, pid: int | None = None, profile: str | None = None,
         sysfs_root: Path | None = None, host: str = "") -> tuple[list[Finding], Store]:
    """Build a Store from the given configuration sources and run the NCCL configuration rules; `host` names
    this machine (the process of `pid` and the sysfs run on it)."""
    frames = []
    if env_file is not None:
        frames.append(env_file_frame(env_file))
    if pid is not None:
        frames.append(process_env_frame(pid, host))
    if not frames:
        frames.append(conform("config", pd.DataFrame(env_rows(safe_env(dict(os.environ)), source="env",
                                                              evidence="current environment"))))
    config = conform("config", pd.concat(frames, ignore_index=True))
    root = sysfs_root if sysfs_root is not None else Path("/sys")
    if sysfs_root is not None and not sysfs_root.is_dir():
        raise UsageError(f"--sysfs-root {sysfs_root} is not a directory")
    run_info = RunInfo(sysfs=[read_sysfs(root, host=host)], nccl_profile=load_profile(profile))
    store = Store(tables={"config": config}, run_info=run_info)
    return api.judge(store, ["nccl_config"]), store


def _print(console: Console, findings: list[Finding], profile: str) -> None:
    profile = escape(printable(profile))  # a name from a user's file: no markup, no control codes
    if not findings:
        console.print(f"[green]No NCCL configuration problems found[/green] (profile {profile}).")
        return
    table = Table(title=f"NCCL configuration check (profile {profile})", show_lines=True)
    table.add_column("severity")
    table.add_column("finding", overflow="fold")
    table.add_column("fix", overflow="fold")
    for f in findings:
        table.add_row(f"[{_STYLE[f.severity]}]{f.severity.label}[/]", Text(printable(f.title)),
                      Text(printable(f.recommendation)))  # env values are in them: no markup, no control codes
    console.print(table)


def lint_env(
    env_file: Annotated[Path | None, typer.Option("--env-file", help="Env file or job spec (KEY=VALUE).")] = None,
    pid: Annotated[int | None, typer.Option("--pid", help="Read this running process's environment.")] = None,
    profile: Annotated[str, nccl_profile_option("Platform profile name or JSON file.")] = "generic",
    sysfs_root: Annotated[Path | None, sysfs_root_option("Root of a sysfs tree (default /sys).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
    fail_on: Annotated[str, fail_on_option("Exit 3 at this severity: warning or critical.")] = "critical",
) -> None:
    """Check NCCL settings before launch (a pre-flight sanity check).

    Examples:
      perftracker lint-env
      perftracker lint-env --pid 4242
      perftracker lint-env --env-file job.env --profile pai-lingjun --fail-on warning
    """
    threshold = parse_fail_on(fail_on)
    findings, store = lint(env_file, pid, profile, sysfs_root, host=host_name())
    if as_json:
        typer.echo(json.dumps([f.to_dict() for f in findings], indent=1))
    else:
        _print(terminal(), findings, str(store.run_info.nccl_profile["name"]))
    raise typer.Exit(fail_on_exit(findings, threshold))
