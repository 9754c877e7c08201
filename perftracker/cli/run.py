"""`perftracker run [options] -- <launch command>`: start a job prepared for diagnosis; post-mortem on exit.

The job's output and exit code pass through unchanged; perftracker's own lines go to stderr,
prefixed `perftracker:`. Whatever happens to the job (normal end, error, signal, collective
timeout), the run directory keeps what was collected and gets a report.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import typer
from rich.console import Console

from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.collectors.loading import LoadOptions
from perftracker.errors import PerftrackerError, UsageError
from perftracker.live.collectors import SamplerOptions, build_samplers
from perftracker.live.discovery import Job, find_job
from perftracker.live.launch import LaunchOptions, RunningJob, exit_status, prepare_env
from perftracker.live.sampler import LiveContext
from perftracker.live.session import run_session
from perftracker.pipeline import analyze_path
from perftracker.rundir import host_name, write_manifest

_ERROR_FILE = re.compile(r"error_file\s*:\s*(\S+)")


def _wait_for_workers(proc_pid: int, running: RunningJob, timeout_s: float = 120.0) -> Job | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running.proc.poll() is None:
        try:
            job = find_job(f"pid:{proc_pid}")
            if job.workers:
                return job
        except PerftrackerError:
            pass
        time.sleep(0.5)
    return None


def _background(run_dir: Path, running: RunningJob, options: SamplerOptions, notes: list[str],
                console: Console) -> None:
    job = _wait_for_workers(running.proc.pid, running)
    if job is None:
        notes.append("no worker processes (with RANK in their environment) appeared; only the job's output was kept")
        return
    ctx = LiveContext(run_dir=run_dir, job=job, host=host_name(), diagnosis=AnalyzerDiagnosis())
    run_session(ctx, build_samplers(options), None, console, show_live=False,
                stop_when=lambda: running.proc.poll() is not None)
    notes.extend(ctx.notes)


def _collect_error_files(run_dir: Path) -> int:
    """Copy torchrun's per-rank error files named in the output into errors/."""
    copied = 0
    for log in (run_dir / "output").glob("launcher.*.log"):
        for match in _ERROR_FILE.finditer(log.read_text(encoding="utf-8", errors="replace")):
            src = Path(match.group(1))
            if src.is_file():
                dst = run_dir / "errors" / f"{copied}.{src.parent.name}.{src.name}"
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                copied += 1
    return copied


def register(app: typer.Typer) -> None:
    @app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def run(
        ctx: typer.Context,
        out: Path | None = typer.Option(None, "--out", "-o", help="Run directory (default perftracker-run-<time>)."),
        hook: bool = typer.Option(True, "--hook/--no-hook", help="Load the step-time hook through a sitecustomize "
                                  "on PYTHONPATH (no code change)."),
        nccl_debug: bool = typer.Option(True, "--nccl-debug/--no-nccl-debug", help="NCCL_DEBUG=INFO with a "
                                        "per-process NCCL_DEBUG_FILE in the run directory (unless you set them)."),
        kineto_daemon: bool = typer.Option(True, "--kineto-daemon/--no-kineto-daemon", help="KINETO_USE_DAEMON=1 so "
                                           "`perftracker attach --trace-steps N` can take traces on demand."),
        flight_recorder: bool = typer.Option(True, "--flight-recorder/--no-flight-recorder", help="Flight recorder "
                                             "with dump on timeout into fr/."),
        interval: float = typer.Option(10.0, "--interval", help="Seconds between GPU/RDMA samples."),
        stack_interval: float = typer.Option(60.0, "--stack-interval", help="Seconds between stack dumps (also "
                                             "taken automatically when progress stops)."),
        fail_on: str | None = typer.Option(None, "--fail-on", help="Exit 3 if the job succeeded but a finding at "
                                              "this severity exists (the job's own failure always wins)."),
    ) -> None:
        """Run a launch command (e.g. `-- torchrun --nproc_per_node 8 train.py`) prepared for diagnosis, and
        write its post-mortem report when it ends. Exits with the job's exit code."""
        command = list(ctx.args)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            raise UsageError("no command to run", "perftracker run", "usage: perftracker run [options] -- torchrun --nproc_per_node 8 train.py")
        err = Console(stderr=True)
        run_dir = (out or Path(f"perftracker-run-{time.strftime('%Y%m%d-%H%M%S')}")).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        env, changed = prepare_env(run_dir, dict(os.environ), LaunchOptions(nccl_debug, kineto_daemon,
                                                                           flight_recorder, hook))
        write_manifest(run_dir, job=" ".join(command)[:500], created_by="perftracker run", prepared=changed,
                       started_ns=time.time_ns(), host=host_name())
        err.print(f"perftracker: run directory {run_dir}", highlight=False, markup=False)
        try:
            running = RunningJob(command, env, run_dir)
        except OSError as exc:
            raise UsageError(f"cannot start {command[0]!r} ({exc.strerror or exc})", "perftracker run",
                             "check the command and PATH") from None
        running.forward_signals()
        notes: list[str] = []
        # one sampled-stack recording of every rank 2 minutes in (past start-up), for the straggler check
        options = SamplerOptions(interval_s=interval, stack_interval_s=stack_interval, logs=False, trace_steps=0,
                                 profile_seconds=10.0, profile_delay_s=120.0)
        bg = threading.Thread(target=_background, args=(run_dir, running, options, notes, err), daemon=True)
        bg.start()
        code = exit_status(running.wait())
        bg.join(timeout=30)
        copied = _collect_error_files(run_dir)
        write_manifest(run_dir, ended_ns=time.time_ns(), exit_code=code, notes=notes, error_files=copied,
                       signal=running.signal_received)
        try:
            result = analyze_path(run_dir, run_dir / "perftracker-out", LoadOptions(cache_dir=None))
        except PerftrackerError as exc:
            err.print(f"perftracker: job exited with {code}; no report ({exc.message})", highlight=False, markup=False)
            raise typer.Exit(code) from None
        verdict = result.document["summary"]["verdict"]
        err.print(f"perftracker: job exited with {code}. {verdict} Report: {result.report_path}", highlight=False,
                  markup=False)
        if code == 0 and fail_on:
            from perftracker.cli.analyze import fail_on_exit

            code = fail_on_exit(result.findings, fail_on)
        sys.stdout.flush()
        raise typer.Exit(code)
