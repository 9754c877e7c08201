"""`perftracker ps`: the training jobs and ranks visible on this host."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from perftracker.cli.options import Host
from perftracker.cli.voice import show, terminal
from perftracker.live.attach.discovery import denied_hint, job_label, list_jobs
from perftracker.reports.text import printable
from perftracker.rundir import host_name


def ps(host: Host = None) -> None:
    """List running training jobs: rank, local rank, pid, host, command (grouped by run id).

    Examples:
      perftracker ps
      perftracker ps --host node-7
    """
    console = terminal()
    jobs = list_jobs(host_name(host))
    if not jobs:
        console.print("No training processes found (none has RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK "
                      "or PMIX_RANK in its environment, or they belong to another user).", highlight=False)
        return
    for job in jobs:
        title = f"job {job_label(job)}"
        if job.launcher_pid and job.run_id and job.run_id != "none":
            title += f", launcher pid {job.launcher_pid}"
        table = Table(title=Text(printable(title)), title_justify="left")
        for col in ("rank", "local rank", "pid", "host", "command"):
            table.add_column(col, overflow="fold")
        for w in job.workers:
            table.add_row(str(w.rank), str(w.local_rank), str(w.pid), Text(printable(w.host)),
                          Text(printable(w.cmdline[:120])))  # Text: a command line is not rich markup
        console.print(table)
    denied = [pid for job in jobs for pid in job.denied]
    if denied:
        show(console, f"Not shown: {denied_hint(denied)}.")
