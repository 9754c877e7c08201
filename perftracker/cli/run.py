"""`perftracker run [options] -- <launch command>`: start a job prepared for diagnosis; post-mortem on exit.

The job's output and exit code pass through unchanged, whatever happens to the job or to perftracker's own
writing; the run directory keeps what was collected and gets a report. `--sanity` checks the nodes first.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perftracker import api
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.cli import options as opt
from perftracker.cli.incidents import watch_options
from perftracker.cli.voice import fail_on_exit, parse_fail_on, say
from perftracker.errors import OutputError, PerftrackerError, UsageError
from perftracker.live.attach.discovery import Job, find_job
from perftracker.live.attach.launch import LaunchOptions, RunningJob, exit_status, prepare_env
from perftracker.live.attach.sanity_first import run_sanity, sanity_command
from perftracker.live.collectors import SamplerOptions, build_samplers, watch_rates
from perftracker.live.sampler import LiveContext
from perftracker.live.session import WATCH_TICK_S, run_session
from perftracker.output_names import REPORT
from perftracker.redaction import redact_command
from perftracker.rundir import SANITY_DIR, host_name, write_manifest
from perftracker.store import LoadNote

_ERROR_FILE = re.compile(r"error_file\s*:\s*(\S+)")
REFUSED_EXIT = 4  # --sanity-exclude: the check named a node to exclude (or failed); the job was not started


def _background(run_dir: Path, host: str, running: RunningJob, options: SamplerOptions, notes: list[str],
                console: Console, overrides: dict[str, object] | None = None) -> None:
    """The live collectors, while the job runs; whatever goes wrong here is a note, never the job's problem."""
    ctx: LiveContext | None = None
    try:
        job: Job | None = None  # the launched job, once its workers have started (for up to 2 minutes)
        deadline = time.monotonic() + 120.0
        while job is None and time.monotonic() < deadline and running.proc.poll() is None:
            with contextlib.suppress(PerftrackerError):
                found = find_job(f"pid:{running.proc.pid}", host)
                job = found if found.workers else None
            if job is None:
                time.sleep(0.5)
        if job is None:
            notes.append("no worker processes (with RANK in their environment) appeared; only the job's output was "
                         "kept")
            return
        ctx = LiveContext(run_dir=run_dir, job=job, host=host, diagnosis=AnalyzerDiagnosis(overrides))
        run_session(ctx, build_samplers(options), None, console, show_live=False,
                    stop_when=lambda: running.proc.poll() is not None, tick_s=WATCH_TICK_S if options.watch else 0.5)
    except PerftrackerError as exc:
        notes.append(f"the live collectors stopped: {exc.message}")
    except Exception as exc:  # a bug in a collector must not reach the job: said, and the job goes on
        notes.append(f"the live collectors stopped ({type(exc).__name__}: {exc}); this is a perftracker bug")
    finally:
        if ctx is not None:
            notes.extend(n for n in ctx.notes if n not in notes)


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


def run(
    ctx: typer.Context,
    out: Annotated[Path | None, opt.out_option("Run directory (default perftracker-run-<time>).")] = None,
    hook: Annotated[bool, typer.Option("--hook/--no-hook", help="Load the step-time hook through a sitecustomize "
                                       "on PYTHONPATH (no code change).")] = True,
    nccl_debug: Annotated[bool, typer.Option("--nccl-debug/--no-nccl-debug", help="NCCL_DEBUG=INFO with a "
                                             "per-process NCCL_DEBUG_FILE in the run directory (unless you set them).")]
    = True,
    kineto_daemon: Annotated[bool, typer.Option("--kineto-daemon/--no-kineto-daemon", help="KINETO_USE_DAEMON=1 so "
                                                "`perftracker attach --trace-steps N` can take traces on "
                                                "demand.")] = True,
    flight_recorder: Annotated[bool, typer.Option("--flight-recorder/--no-flight-recorder", help="Flight recorder "
                                                  "with dump on timeout into fr/.")] = True,
    interval: opt.Interval = 10.0,
    stack_interval: Annotated[float, opt.stack_interval_option("Seconds between stack dumps (also taken automatically "
                                                           "when progress stops).")] = 60.0,
    host: opt.Host = None,
    fail_on: Annotated[str | None, opt.fail_on_option("Exit 3 if the job succeeded but a finding at this severity "
                                                  "exists (the job's own failure always wins).")] = None,
    watch: Annotated[bool, opt.watch_option(duration=False)] = False,
    watch_window: opt.WatchWindow = 10,
    watch_rise: opt.WatchRise = 0.2,
    incident_seconds: opt.IncidentSeconds = 10.0,
    prom: opt.Prom = None,
    set_threshold: opt.SetThresholds = None,
    thresholds_file: opt.ThresholdsFiles = None,
    sanity: Annotated[bool, typer.Option("--sanity", help="Run `perftracker sanity` first, launched the "
                                         "way the job is, into RUN/sanity.")] = False,
    sanity_exclude: Annotated[bool, typer.Option("--sanity-exclude", help="With the check first: do not "
                                                 f"start the job (exit {REFUSED_EXIT}) when it names a node to "
                                                 "exclude, or fails.")] = False,
    sanity_time_box: Annotated[float, typer.Option("--sanity-time-box", metavar="S",
                                                   help="The check's time box in seconds.")] = 20.0,
) -> None:
    """Run a launch command (e.g. `-- torchrun --nproc_per_node 8 train.py`) prepared for diagnosis, and
    write its post-mortem report when it ends. Exits with the job's exit code (or 4: --sanity-exclude refused).

    Examples:
      perftracker run -o run/ -- torchrun --nproc_per_node 8 train.py
      perftracker run --watch -o run/ -- torchrun --nproc_per_node 8 train.py
      perftracker run --sanity-exclude -o run/ -- torchrun --nnodes 4 --nproc_per_node 8 train.py
    """
    threshold = parse_fail_on(fail_on)
    overrides = opt.threshold_overrides(set_threshold, thresholds_file)
    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command to run", "run", "usage: perftracker run [options] -- torchrun "
                         "--nproc_per_node 8 train.py")
    watching, publisher = watch_options(watch_window, watch_rise, prom, incident_seconds, overrides) if watch else (None, None)
    me = host_name(host)  # every host-keyed name this command (and the ranks' hook) writes uses it
    run_dir = (out or Path(f"perftracker-run-{time.strftime('%Y%m%d-%H%M%S')}")).resolve()
    opt.writable_folder(run_dir)
    with api.writing(run_dir):  # before the job starts: nothing was started when this fails
        run_dir.mkdir(parents=True, exist_ok=True)
        env, changed = prepare_env(run_dir, dict(os.environ), LaunchOptions(nccl_debug, kineto_daemon,
                                                                           flight_recorder, hook,
                                                                           host=me if host else ""))
        write_manifest(run_dir, job=" ".join(redact_command(command))[:500], created_by="perftracker run",
                       prepared=changed, started_ns=time.time_ns(), host=me)
    say(f"run directory {run_dir}")
    if sanity or sanity_exclude:
        _sanity_first(command, run_dir, sanity_time_box, refuse=sanity_exclude)
    try:
        running = RunningJob(command, env, run_dir)
    except OSError as exc:
        raise UsageError(f"cannot start {command[0]!r} ({exc.strerror or exc})", "run",
                         "check the command and PATH") from None
    running.forward_signals()
    notes: list[str] = []
    # one sampled-stack recording of every rank 2 minutes in (past start-up), for the straggler check
    options = SamplerOptions(interval_s=interval, stack_interval_s=stack_interval, logs=False, trace_steps=0,
                             profile_seconds=10.0, profile_delay_s=120.0)
    if watching is not None:  # the online rules; their baseline replaces the recording 2 minutes in
        options.watch = watching
        options = watch_rates(options)
    bg = threading.Thread(target=_background, args=(run_dir, me, running, options, notes, Console(stderr=True), overrides),
                          daemon=True)
    bg.start()
    code = exit_status(running.wait())
    bg.join(timeout=150 if watching is not None else 30)  # an incident being captured is finished and analyzed
    if publisher is not None:
        publisher.close()
    for problem in running.copy_problems():
        say(problem)
        notes.append(problem)
    try:
        code = _post_mortem(run_dir, code, running, notes, threshold, overrides)
    except Exception as exc:  # the job's exit code is the contract: a perftracker bug must not replace it
        say(f"job exited with {code}; no report (internal error: {type(exc).__name__}: {exc}; run "
            f"`perftracker postmortem {run_dir}` with PERFTRACKER_DEBUG=1 and report it)")
    sys.stdout.flush()
    raise typer.Exit(code)


def _sanity_first(command: list[str], run_dir: Path, time_box_s: float, refuse: bool) -> None:
    """The check before the job (live/attach/sanity_first.py); with `refuse`, exit REFUSED_EXIT instead of starting a job
    that a node named for exclusion would slow, or whose nodes could not be checked."""
    if not 5 <= time_box_s <= 3600:
        raise UsageError(f"--sanity-time-box {time_box_s:g} is outside 5..3600 seconds", "--sanity-time-box")
    out = run_dir / SANITY_DIR
    check = sanity_command(command, out, time_box_s)
    say(f"sanity check first: {' '.join(redact_command(check))[:300]}")
    try:
        outcome = run_sanity(check, dict(os.environ), out, time_box_s)
    except OutputError as exc:  # the check's own folder cannot be written: it could not run
        say(f"the sanity check could not run: {exc.message}")
        if refuse:
            say("not starting the job (--sanity-exclude): the nodes could not be checked")
            raise typer.Exit(REFUSED_EXIT) from None
        return
    write_manifest(run_dir, sanity={"command": redact_command(check), "exit_code": outcome.code,
                                    "exclude": outcome.exclude, "wrote": outcome.wrote, "passed": outcome.passed})
    if outcome.exclude:
        why = "; ".join(f"{host}: {' / '.join(titles[:2]) or 'see the report'}" for host, titles in outcome.why.items())
        say(f"the sanity check would exclude {', '.join(outcome.exclude)} ({why}); {out / REPORT}")
        if refuse:
            say(f"not starting the job (--sanity-exclude): leave {', '.join(outcome.exclude)} out "
                f"({out / 'exclude.txt'}, {out / 'hostfile'}) and launch again")
            raise typer.Exit(REFUSED_EXIT)
    elif not outcome.passed:
        said = f": {outcome.reason}" if outcome.reason else ""
        say(f"the sanity check failed (exit {outcome.code}{', past its time limit' if outcome.timed_out else ''})"
            f"{said}; its output: {out / 'launch.log'}")
        if refuse:
            say("not starting the job (--sanity-exclude): the nodes could not be checked")
            raise typer.Exit(REFUSED_EXIT)
    elif not outcome.wrote:
        say("the sanity check passed here; its result is written on rank 0's node (this is another node)")
    else:
        say(f"the sanity check names no node to exclude; {out / REPORT}")


def _post_mortem(run_dir: Path, code: int, running: RunningJob, notes: list[str], threshold: Severity | None,
                 overrides: dict[str, object] | None = None) -> int:
    """Keep the job's error files, finish the manifest, analyze; say each problem. The exit code to return."""
    try:
        copied = _collect_error_files(run_dir)
    except OSError as exc:
        copied = 0
        notes.append(f"torchrun's error files could not be copied into errors/ ({exc.strerror or exc})")
    try:
        write_manifest(run_dir, ended_ns=time.time_ns(), exit_code=code, notes=notes, error_files=copied,
                       signal=running.signal_received)
    except OSError as exc:
        say(f"the manifest could not be finished ({exc.strerror or exc}); exit code {code} and notes are not in it")
    try:
        with api.load(run_dir, cache=False) as store:
            store.notes.extend(LoadNote("warning", "perftracker run", note) for note in running.copy_problems())
            result = api.analyze_store(store, run_dir, analysis=api.AnalysisOptions(thresholds=overrides or {}))
        result.write(run_dir / "perftracker-out")
    except api.ReportNotWritten as exc:
        say(f"job exited with {code}. {exc.result.verdict} No report: {exc.message}")
        return code
    except PerftrackerError as exc:
        say(f"job exited with {code}; no report ({exc.message})")
        return code
    say(f"job exited with {code}. {result.verdict} Report: {result.report_path}")
    return fail_on_exit(result.findings, threshold) if code == 0 else code
