"""Options several commands share, defined once: flag names, short forms, environment variables, and the
checks of their values before a command does any work (`writable_folder`, `writable_file`, `checked_engine`: a
usage error, exit 2).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from perftracker.analyzers.online.step_rules import DEFAULT_RISE, DEFAULT_WINDOW
from perftracker.analyzers.thresholds import Thresholds, collect_overrides
from perftracker.collectors.nccl.profiles import shipped_profiles
from perftracker.errors import OutputError, output_error


def _shared(*flags: str, **fixed: Any) -> Callable[[str], Any]:
    """An option several commands share: its flags (and fixed settings) defined here, its help by each command."""
    return lambda help: typer.Option(*flags, help=help, **fixed)


fail_on_option = _shared("--fail-on", metavar="warning|critical")  # see voice.parse_fail_on
out_option = _shared("--out", "-o")  # where the command writes
quiet_option = _shared("--quiet", "-q")
sysfs_root_option = _shared("--sysfs-root")  # the node's sysfs (or a copy of it)
stack_interval_option = _shared("--stack-interval")  # seconds between the stack sampler's rounds


def nccl_profile_option(help: str) -> Any:
    """`--profile NAME|FILE`: the NCCL platform profile of the configuration rules (its help lists the shipped
    names as the choices, then FILE for a JSON file of one's own)."""
    return typer.Option("--profile", metavar="|".join([*shipped_profiles(), "FILE"]), help=help)


def ray_address_option(workers: bool = True) -> Any:
    """`--ray-address HOST:PORT` (or $RAY_ADDRESS): the Ray cluster of `--engine ray` (`workers`: the command has
    `--workers`, which bounds the CPUs of a Ray it starts)."""
    cpus = "--workers CPUs" if workers else "this machine's CPUs"
    return typer.Option("--ray-address", envvar="RAY_ADDRESS", metavar="HOST:PORT", help=(
        "With --engine ray: the cluster's head node (HOST:PORT, ray://HOST:10001 for Ray Client, or auto for a Ray "
        "started on this machine with ray start). Without it or $RAY_ADDRESS, a Ray is started on this machine "
        f"for the command (ray.init(), {cpus}) and stopped afterwards."))


FailOn = Annotated[str | None, fail_on_option(
    "Exit 3 when a finding at or above this severity exists (warning or critical): for CI gates and job hooks.")]
Engine = Annotated[str, typer.Option("--engine", metavar="local|ray", help=(
    "Where the traces are parsed: local (a process pool on this machine, the default) or ray (one Ray task "
    "per trace on a cluster, see --ray-address; needs pip install 'perftracker-dl\\[ray]', perftracker on every "
    "node, and the traces at the same path on every node)."))]
RayAddress = Annotated[str | None, ray_address_option()]
RayAddressNoWorkers = Annotated[str | None, ray_address_option(workers=False)]  # commands without --workers
FollowLinks = Annotated[bool, typer.Option("--follow-links", help=(
    "Read files that symlinks in the input lead to outside it (never /proc, /sys, /dev); without it such a "
    "link is left out with a note naming it."))]
QuietVerdict = Annotated[bool, quiet_option("Print only the verdict line.")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Do not read or write the parsed-trace cache.")]
Interval = Annotated[float, typer.Option("--interval", help="Seconds between GPU/RDMA samples.")]  # live samplers
Host = Annotated[str | None, typer.Option(
    "--host", envvar="PERFTRACKER_HOST", help="This node's name in host-keyed files and records (default: the "
    "hostname up to its first dot); give each node a distinct one where hostnames repeat.")]


def writable_folder(path: Path, option: str = "-o") -> Path:
    """`path`, checked before a command does any work: a folder, or one that can be made, that this process
    can write into (a file is written and removed in it, or in its nearest existing parent: nothing is
    left behind). An OutputError saying what to do when it is a file, lies under one, or is not writable."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == path.absolute() else f"lies under {existing}, which is a file"
        raise OutputError(f"{where}, not a folder", str(path),
                          f"give {option} a folder (it is made when missing), or move the file away")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".perftracker-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise output_error(path, exc, option) from None
    return path


def output_folder(path: Path, option: str = "-o") -> Path:
    """`writable_folder`, and one perftracker may write its outputs into (`output_dir.refuse_foreign`: not a
    symlink, not a user's folder that is not empty), checked before any work."""
    from perftracker.output_dir import refuse_foreign

    refuse_foreign(writable_folder(path, option), option)
    return path


def writable_file(path: Path, option: str) -> Path:
    """`path`, checked before a command does any work: a file name (not a folder) in a folder this
    process can write into (see `writable_folder`)."""
    if path.is_dir():
        raise OutputError("is a folder, not a file", str(path), f"give {option} the name of a file to write")
    writable_folder(path.absolute().parent, option)
    return path


def checked_engine(name: str) -> str:
    """The `--engine` name, checked before any work: a UsageError for an unknown one, or for ray when the
    Ray extra is not installed."""
    from perftracker.collectors.engines import checked_engine_name

    if checked_engine_name(name) == "ray":
        from perftracker.collectors.engines.ray_engine import import_ray

        import_ray()
    return name


SetThresholds = Annotated[list[str] | None, typer.Option(
    "--set", metavar="NAME=VALUE", help="Change one threshold for this run, e.g. --set straggler.alpha=0.005 "
    "(repeatable; `perftracker thresholds` lists every name, its unit and default). findings.json records "
    "the changes.")]
ThresholdsFiles = Annotated[list[Path] | None, typer.Option(
    "--thresholds", metavar="FILE.toml", help="A TOML file of thresholds to change (NAME = VALUE per line, or "
    "\\[straggler] then alpha = 0.005); repeatable, --set wins.")]


def threshold_overrides(assignments: list[str] | None, files: list[Path] | None) -> dict[str, object]:
    """`--set` and `--thresholds` as the overrides of AnalysisOptions.thresholds, checked before any work
    (an unknown name or a value out of range is the usage error that names the closest name: exit 2)."""
    overrides = collect_overrides(assignments, files)
    Thresholds.with_overrides(overrides)
    return overrides


def watch_option(duration: bool = True) -> Any:
    """`--watch` (`duration`: the command has `--duration`, which --watch sets to 0)."""
    until = "until it ends (as --duration 0)" if duration else "until it ends"
    return typer.Option("--watch", help=f"Stay with the job {until}, cheaply, and open an "
                        "incident (RUN/incidents/<time>-<kind>/: evidence, findings.json, report.html) when its "
                        "steps slow down, it hangs, or a host signal fires.")


WatchWindow = Annotated[int, typer.Option(
    "--watch-window", help=f"N: steps averaged by the degradation rule (default {DEFAULT_WINDOW}).")]
WatchRise = Annotated[float, typer.Option("--watch-rise", help="X: the mean of the last N steps this much above the "
                                          f"recent best (a fraction; default {DEFAULT_RISE:g}) triggers the change-point test.")]
IncidentSeconds = Annotated[float, typer.Option(
    "--incident-seconds", help="With --watch: seconds of every rank's stacks recorded side by side when an incident "
    "opens, and once, as the healthy baseline they are compared with, when the watch arms.")]
Prom = Annotated[str | None, typer.Option(
    "--prom", help="With --watch: Prometheus metrics, as a text file rewritten atomically (FILE) or served at "
    "http://HOST:PORT/metrics ([HOST]:PORT, 127.0.0.1 by default).")]
