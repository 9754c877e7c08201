"""`perftracker attach <job>`: collect from a running job without restarting it, then diagnose."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.console import Console

from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.collectors.loading import LoadOptions
from perftracker.errors import PerftrackerError
from perftracker.live.collectors import SamplerOptions, build_samplers
from perftracker.live.discovery import find_job, job_label
from perftracker.live.sampler import LiveContext
from perftracker.live.session import run_session
from perftracker.pipeline import analyze_path
from perftracker.reports.text import print_summary
from perftracker.rundir import host_name


def register(app: typer.Typer) -> None:
    @app.command("attach")
    def attach(
        job: str = typer.Argument(..., help="A torchrun launcher PID, a worker PID, a TORCHELASTIC_RUN_ID or a "
                                  "command-line pattern (prefix pid:, runid: or cmd: to be explicit)."),
        out: Path | None = typer.Option(None, "--out", "-o", help="Run directory to write (default "
                                           "perftracker-run-<time>). Several hosts may share one directory."),
        duration: float = typer.Option(60.0, "--duration", "-d", help="Seconds to collect; 0 = until Ctrl-C or "
                                       "the job ends."),
        interval: float = typer.Option(5.0, "--interval", help="Seconds between GPU/RDMA samples."),
        stack_interval: float = typer.Option(15.0, "--stack-interval", help="Seconds between non-blocking py-spy "
                                             "dumps of every rank (each costs about 6 ms of CPU per rank)."),
        stacks: bool = typer.Option(True, "--stacks/--no-stacks", help="Python stacks with py-spy."),
        profile_seconds: float = typer.Option(10.0, "--profile-seconds", help="Record every rank's stacks with "
                                              "`py-spy record` (non-blocking) for this many seconds, once, 2 s "
                                              "after attaching, to find a straggler without preparing the job; "
                                              "0 = off."),
        profile_rate: int = typer.Option(20, "--profile-rate", help="Samples per second of --profile-seconds."),
        gpu: bool = typer.Option(True, "--gpu/--no-gpu", help="NVML GPU samples."),
        rdma: bool = typer.Option(True, "--rdma/--no-rdma", help="RDMA port counters from sysfs."),
        logs: bool = typer.Option(True, "--logs/--no-logs", help="Follow NCCL logs and the job's output files."),
        steps: bool = typer.Option(True, "--steps/--no-steps", help="Step times from the hook or the job's log."),
        nccl_log: list[Path] = typer.Option([], "--nccl-log", help="An NCCL log file to follow (repeatable)."),
        job_log: Path | None = typer.Option(None, "--job-log", help="The job's log file, to parse step lines "
                                               "(Megatron, DeepSpeed, Hugging Face Trainer)."),
        trace_steps: int = typer.Option(0, "--trace-steps", help="Ask every rank for a CUDA/CPU kernel trace of N "
                                        "steps (jobs started with KINETO_USE_DAEMON=1 or the perftracker hook)."),
        stacks_at: float | None = typer.Option(None, "--stacks-at", help="Epoch seconds at which to take one "
                                                  "stack snapshot on this node: give every node the same value to "
                                                  "see a hang across the whole job."),
        host: str | None = typer.Option(None, "--host", envvar="PERFTRACKER_HOST", help="This node's name in "
                                        "host-keyed files (default: the hostname up to its first dot); give "
                                        "each node a distinct one where hostnames repeat."),
        sysfs_root: Path = typer.Option(Path("/sys"), "--sysfs-root", help="Root of sysfs (tests use a fake tree)."),
        analyze: bool = typer.Option(True, "--analyze/--no-analyze", help="Analyze the run directory at the end."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No live panel."),
    ) -> None:
        """Attach to a running job: environment, NCCL logs, stacks, GPU and RDMA samples, step times; then a
        diagnosis. Read-only: the job is never paused (non-blocking stacks) and keeps running after."""
        console = Console()
        if host:
            os.environ["PERFTRACKER_HOST"] = host  # every host-keyed name this process writes agrees
        found = find_job(job)
        run_dir = out or Path(f"perftracker-run-{time.strftime('%Y%m%d-%H%M%S')}")
        run_dir.mkdir(parents=True, exist_ok=True)
        console.print(f"Attached to {len(found.workers)} rank(s) "
                      f"({', '.join(str(w.rank) for w in found.workers[:16])}) of job "
                      f"{job_label(found)}; writing {run_dir}", highlight=False)
        ctx = LiveContext(run_dir=run_dir, job=found, host=host_name(), sysfs_root=sysfs_root,
                          diagnosis=AnalyzerDiagnosis())
        if stacks:
            console.print(f"Stacks of every rank on demand: kill -USR1 {os.getpid()}, or touch "
                          f"{run_dir / 'requests' / 'stacks'} (reaches every attach sharing {run_dir})",
                          highlight=False, markup=False)
        options = SamplerOptions(interval_s=interval, stack_interval_s=stack_interval, stacks=stacks, gpu=gpu,
                                 rdma=rdma, logs=logs, steps=steps, nccl_logs=list(nccl_log), job_log=job_log,
                                 trace_steps=trace_steps, stacks_at=stacks_at, profile_seconds=profile_seconds,
                                 profile_rate_hz=profile_rate)
        samplers = build_samplers(options)
        result = run_session(ctx, samplers, duration if duration > 0 else None, console, show_live=not quiet)
        console.print(f"Stopped ({result.reason}) after {result.seconds:.0f}s; run directory: {run_dir}", highlight=False)
        for note in ctx.notes:
            console.print(f"  note: {note}", highlight=False, markup=False)
        others = _other_hosts(run_dir, ctx.host)
        if others:
            console.print(f"Hosts {', '.join(others)} also write to {run_dir}: this verdict covers what has been "
                          f"collected so far; run `perftracker analyze {run_dir}` once every node has stopped.",
                          highlight=False, markup=False)
        if analyze:
            try:
                analysis = analyze_path(run_dir, run_dir / "perftracker-out", LoadOptions(cache_dir=None))
            except PerftrackerError as exc:
                console.print(f"Nothing to analyze yet: {exc.message}", highlight=False, markup=False)
                return
            print_summary(console, analysis.findings, analysis.report_path,
                          coverage=analysis.document["summary"].get("coverage"))


def _other_hosts(run_dir: Path, me: str) -> list[str]:
    """Hosts other than `me` with a manifest in a shared run directory."""
    folder = run_dir / "manifests"
    names = sorted(p.name[:-len(".json")] for p in folder.glob("*.json")) if folder.is_dir() else []
    return [n for n in names if n != me]
