"""Options several commands share, defined once: flag names, short forms, environment variables.

A command types its parameter with one of these, e.g. `fail_on: FailOn = None`, `host: Host = None`.
Where the flag is the same but its meaning differs per command (what `-o` names, what `--quiet`
silences), the factory takes that command's help text. `--fail-on` values are checked by
`voice.parse_fail_on`; the host name by `rundir.host_name`, once per command.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

FAIL_ON_HELP = ("Exit 3 when a finding at or above this severity exists (warning or critical): for CI gates "
                "and job hooks.")


def fail_on_option(help: str = FAIL_ON_HELP) -> Any:
    """`--fail-on LEVEL` (see voice.parse_fail_on)."""
    return typer.Option("--fail-on", help=help)


def out_option(help: str) -> Any:
    """`--out/-o DIR`: where the command writes."""
    return typer.Option("--out", "-o", help=help)


def quiet_option(help: str) -> Any:
    """`--quiet/-q`."""
    return typer.Option("--quiet", "-q", help=help)


def sysfs_root_option(help: str) -> Any:
    """`--sysfs-root DIR`: the node's sysfs (or a copy of it)."""
    return typer.Option("--sysfs-root", help=help)


def nccl_profile_option(help: str) -> Any:
    """`--profile NAME|FILE`: the NCCL platform profile of the configuration rules."""
    return typer.Option("--profile", help=help)


def interval_option(help: str = "Seconds between GPU/RDMA samples.") -> Any:
    """`--interval S` of the live samplers."""
    return typer.Option("--interval", help=help)


def stack_interval_option(help: str) -> Any:
    """`--stack-interval S` of the stack sampler."""
    return typer.Option("--stack-interval", help=help)


FailOn = Annotated[str | None, fail_on_option()]
Host = Annotated[str | None, typer.Option(
    "--host", envvar="PERFTRACKER_HOST", help="This node's name in host-keyed files and records (default: the "
    "hostname up to its first dot); give each node a distinct one where hostnames repeat.")]
