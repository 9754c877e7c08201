"""`perftracker sanity`: measure every node of a job before the job starts, and name the ones to leave out.

Promise: launched the way the job is (`torchrun [--nnodes N ...] -m perftracker sanity -o OUT`, or under srun /
mpirun with MASTER_ADDR and MASTER_PORT exported; alone it checks this machine), every rank measures its
device, the collectives over all ranks and (one rank per node) every pair of nodes, within `--time-box`
seconds (default 120, `--quick` 20; a dead or hung node costs at most one collective timeout more); rank 0
gathers, judges (analyzers/sanity) and writes OUT (cli/sanity_out.py). When rank 0 is gone (nothing said by the
end of the box plus two collective timeouts), the lowest live rank writes in its place (comm.fallback_gather),
naming rank 0's node unreachable. Exit codes: 0, 3 when a finding at or above `--fail-on` exists (on the rank
that wrote; other ranks exit 0), 2 for a usage error.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from perftracker.analyzers.findings import Severity
from perftracker.analyzers.sanity.judge import judge
from perftracker.analyzers.sanity.results import SanityResults
from perftracker.cli.lint_env import lint
from perftracker.cli.options import (
    fail_on_option,
    nccl_profile_option,
    out_option,
    sysfs_root_option,
    writable_folder,
)
from perftracker.cli.sanity_out import write_outputs
from perftracker.cli.voice import add_command, fail_on_exit, parse_fail_on
from perftracker.collectors.sanity import DEFAULT_S, QUICK_S
from perftracker.errors import UsageError
from perftracker.rundir import host_name

WAIT_SLACK_S = 5.0  # the other ranks wait this much past rank 0's latest end before writing in its place


def sanity(
    out: Annotated[Path, out_option("Folder rank 0 writes the report, findings and exclude lists into.")],
    quick: Annotated[bool, typer.Option("--quick", metavar="", help=f"A short check: a {QUICK_S:g} s time box.")] = False,
    time_box: Annotated[float | None, typer.Option("--time-box", metavar="S",
                                                   help=f"Seconds the check may take (default {DEFAULT_S:g}).")] = None,
    fail_on: Annotated[str | None, fail_on_option()] = None,
    exclude_at: Annotated[str, typer.Option("--exclude-at", metavar="warning|critical",
                                            help="Exclude nodes with a finding at or above this severity.")] = "critical",
    profile: Annotated[str, nccl_profile_option("NCCL setting lint's platform profile.")] = "generic",
    sysfs_root: Annotated[Path, sysfs_root_option("Root of sysfs for the node's links.")] = Path("/sys"),
) -> None:
    """Measure every node of a job before it starts (compute, memory, collectives, node pairs) and name bad nodes.

    Examples:
      torchrun --nnodes 4 --nproc-per-node 8 --rdzv-endpoint head:29500 -m perftracker sanity -o sanity/
      torchrun --nproc-per-node 2 -m perftracker sanity -o sanity/ --quick
      srun --nodes 16 python -m perftracker sanity -o sanity/ --fail-on warning
    """
    started = time.monotonic()
    threshold = parse_fail_on(fail_on)
    try:
        exclude_sev = Severity.parse(exclude_at)
    except ValueError as exc:
        raise UsageError(str(exc), "--exclude-at") from None
    box = time_box if time_box is not None else (QUICK_S if quick else DEFAULT_S)
    if not 5 <= box <= 3600:
        raise UsageError(f"--time-box {box:g} is outside 5..3600 seconds", "--time-box")
    # torch only now: every other command (and this one's --help) starts without it
    from perftracker.collectors.sanity.comm import Launch
    from perftracker.collectors.sanity.measure import device_for, measure, plan_for
    from perftracker.collectors.sanity.node import node_facts

    launch = Launch.from_env(os.environ)
    if launch.rank == 0:
        writable_folder(out)
    host = host_name()
    device = device_for(launch.local_rank)
    plan = plan_for(box, device)
    node = {}
    if launch.local_rank == 0:
        node = node_facts(sysfs_root, with_gpus=device.type == "cuda")
        node["lint"] = [f.to_dict() for f in lint(profile=profile, sysfs_root=sysfs_root, host=host)[0]]
    comm, record = measure(launch, plan, host, node, device, started)
    if launch.rank != 0:
        if comm is None:
            return
        comm.post(record)
        gathered = comm.fallback_gather(record, comm.joined_at + box + 2 * plan.timeout_s + WAIT_SLACK_S)
        if gathered is None:  # rank 0 gathered (or another rank writes in its place)
            clean = not record["errors"]
            comm.close(clean=clean)
            _leave(0, broken_group=not clean)
            return
        typer.echo(f"perftracker sanity: rank 0 sent nothing; rank {launch.rank} ({host}) writes the result",
                   err=True)
        writable_folder(out)
    else:
        gathered = comm.gather(record, comm.joined_at + box) if comm is not None else {0: record}
        if comm is not None:
            comm.mark_gathered()
    hosts = comm.hosts if comm is not None and comm.hosts else [host] * launch.world
    results = SanityResults(hosts=hosts, records=gathered, time_box_s=box,
                            elapsed_s=round(time.monotonic() - (comm.joined_at if comm is not None else started), 3))
    verdict = judge(results, exclude_sev)
    write_outputs(out, results, verdict)
    clean = not record["errors"] and len(gathered) == launch.world
    if comm is not None:
        comm.close(clean=clean)
    worst = [f for f in verdict.findings if f.severity >= Severity.WARNING]
    typer.echo(f"perftracker sanity: {len(dict.fromkeys(hosts))} node(s), {len(worst)} warning(s) or worse; "
               f"exclude: {', '.join(verdict.exclude) or 'none'}; {out / 'report.html'} "
               f"({results.elapsed_s:.1f} s)")
    _leave(fail_on_exit(verdict.findings, threshold), broken_group=comm is not None and not clean)


def _leave(code: int, broken_group: bool) -> None:
    """End the command with `code`. After a process group a dead peer broke, without the interpreter's teardown:
    torch's gloo group can abort the process in its destructors (exit -6 on a rank whose work was done, seen
    when rank 0's node was killed), and the check's result is already written and said."""
    if not broken_group:
        raise typer.Exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def register(app: typer.Typer) -> None:
    """Add the `sanity` command to `app`."""
    add_command(app, "sanity", sanity)
