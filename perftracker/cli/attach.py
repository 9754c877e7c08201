"""`perftracker attach <job>`: collect from a running job without restarting it, then diagnose.

Ctrl-C, SIGTERM and SIGHUP stop it the same way (`live/session.py` `Interrupts`): everything collected is kept, the
manifests written and the run directory analyzed unless `--no-analyze`.
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from perftracker import api
from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.cli import options as opt
from perftracker.cli.incidents import watch_options
from perftracker.cli.voice import fail_on_exit, parse_fail_on, print_run, show, terminal, write_and_say
from perftracker.errors import PerftrackerError
from perftracker.live.attach.discovery import find_job, job_label
from perftracker.live.collectors import SamplerOptions, build_samplers, watch_rates
from perftracker.live.sampler import LiveContext
from perftracker.live.session import WATCH_TICK_S, Interrupts, run_session
from perftracker.rundir import host_name


def attach(
    job: Annotated[str, typer.Argument(help="A torchrun launcher PID, a worker PID, a TORCHELASTIC_RUN_ID or a "
                                       "command-line pattern (prefix pid:, runid: or cmd: to be explicit).")],
    out: Annotated[Path | None, opt.out_option("Run directory to write (default perftracker-run-<time>). Several "
                                           "hosts may share one directory.")] = None,
    duration: Annotated[float, typer.Option("--duration", "-d", help="Seconds to collect; 0 = until Ctrl-C or the "
                                            "job ends.")] = 60.0,
    interval: opt.Interval = 5.0,
    stack_interval: Annotated[float, opt.stack_interval_option("Seconds between non-blocking py-spy dumps of every rank "
                                                           "(each costs about 6 ms of CPU per rank).")] = 15.0,
    stacks: Annotated[bool, typer.Option("--stacks/--no-stacks", help="Python stacks with py-spy.")] = True,
    profile_seconds: Annotated[float, typer.Option("--profile-seconds", help="Record every rank's stacks with "
                                                   "`py-spy record` (non-blocking) for this many seconds, once, "
                                                   "2 s after attaching, to find a straggler without preparing "
                                                   "the job; 0 = off.")] = 10.0,
    profile_rate: Annotated[int, typer.Option("--profile-rate", help="Samples per second of --profile-seconds.")]
    = 20,
    gpu: Annotated[bool, typer.Option("--gpu/--no-gpu", help="NVML GPU samples.")] = True,
    rdma: Annotated[bool, typer.Option("--rdma/--no-rdma", help="RDMA port counters from sysfs.")] = True,
    net: Annotated[bool, typer.Option("--net/--no-net", help="Counters of the Ethernet interfaces the job "
                                      "uses (and TCP retransmissions), every second.")] = True,
    logs: Annotated[bool, typer.Option("--logs/--no-logs", help="Follow NCCL logs and the job's output files.")] = True,
    steps: Annotated[bool, typer.Option("--steps/--no-steps", help="Step times from the hook or the job's log.")] = True,
    nccl_log: Annotated[list[Path] | None, typer.Option("--nccl-log", help="An NCCL log file to follow "
                                                        "(repeatable).")] = None,
    job_log: Annotated[Path | None, typer.Option("--job-log", help="The job's log file, to parse step lines "
                                                 "(Megatron, DeepSpeed, Hugging Face Trainer).")] = None,
    trace_steps: Annotated[int, typer.Option("--trace-steps", help="Ask every rank for a CUDA/CPU kernel trace of "
                                             "N steps (jobs started with KINETO_USE_DAEMON=1 or the perftracker "
                                             "hook).")] = 0,
    stacks_at: Annotated[float | None, typer.Option("--stacks-at", help="Epoch seconds at which to take one stack "
                                                    "snapshot on this node: give every node the same value to see "
                                                    "a hang across the whole job.")] = None,
    host: opt.Host = None,
    sysfs_root: Annotated[Path, opt.sysfs_root_option("Root of sysfs (tests use a fake tree).")] = Path("/sys"),
    analyze: Annotated[bool, typer.Option("--analyze/--no-analyze", help="Analyze the run directory at the end.")] = True,
    fail_on: Annotated[str | None, opt.fail_on_option("Exit 3 when the diagnosis at the end has a finding at or above "
                                                  "this severity (warning or critical).")] = None,
    quiet: Annotated[bool, opt.quiet_option("No live panel.")] = False,
    watch: Annotated[bool, opt.watch_option()] = False,
    watch_window: opt.WatchWindow = 10,
    watch_rise: opt.WatchRise = 0.2,
    incident_seconds: opt.IncidentSeconds = 10.0,
    prom: opt.Prom = None,
    stack_steps_every: Annotated[float, typer.Option("--stack-steps-every", help="--watch on a job with no other "
                                                     "step signal (no hook, no step lines, no NCCL Inspector): "
                                                     "seconds between the sampled-stack bursts that give its "
                                                     "iteration period; 0 = off.")] = 60.0,
    set_threshold: opt.SetThresholds = None,
    thresholds_file: opt.ThresholdsFiles = None,
) -> None:
    """Attach to a running job: environment, NCCL logs, stacks, GPU and RDMA samples, step times; then a
    diagnosis. Read-only: the job is never paused (non-blocking stacks) and keeps running after.

    Examples:
      perftracker attach 4242 -o run/ --duration 60
      perftracker attach runid:my-job -o run/ --watch
      perftracker attach cmd:train.py -o run/ --trace-steps 5
    """
    threshold = parse_fail_on(fail_on)
    overrides = opt.threshold_overrides(set_threshold, thresholds_file)
    me = host_name(host)  # every host-keyed name this command writes uses it
    run_dir = out or Path(f"perftracker-run-{time.strftime('%Y%m%d-%H%M%S')}")
    opt.writable_folder(run_dir)
    options = SamplerOptions(interval_s=interval, stack_interval_s=stack_interval, stacks=stacks, gpu=gpu,
                             rdma=rdma, net=net, logs=logs, steps=steps, nccl_logs=list(nccl_log or ()), job_log=job_log,
                             trace_steps=trace_steps, stacks_at=stacks_at, profile_seconds=profile_seconds,
                             profile_rate_hz=profile_rate, stack_steps_every_s=max(0.0, stack_steps_every))
    publisher = None
    if watch:  # until the job ends, at the cheap steady-state rates, with the online rules
        options.watch, publisher = watch_options(watch_window, watch_rise, prom, incident_seconds, overrides)
        options, duration = watch_rates(options), 0.0
    interrupts = Interrupts().install()  # SIGTERM and SIGHUP stop attach as Ctrl-C does
    try:
        console = terminal()
        found = find_job(job, me)
        with api.writing(run_dir):
            run_dir.mkdir(parents=True, exist_ok=True)
        show(console, f"Attached to {len(found.workers)} rank(s) ({', '.join(str(w.rank) for w in found.workers[:16])})"
                      f" of job {job_label(found)}; writing {run_dir}")
        ctx = LiveContext(run_dir=run_dir, job=found, host=me, sysfs_root=sysfs_root,
                          diagnosis=AnalyzerDiagnosis(overrides))
        if options.stacks:
            show(console, f"Stacks of every rank on demand: kill -USR1 {os.getpid()}, or touch "
                          f"{run_dir / 'requests' / 'stacks'} (reaches every attach sharing {run_dir})")
        result = run_session(ctx, build_samplers(options), duration if duration > 0 else None, console,
                             show_live=not quiet, interrupts=interrupts, tick_s=WATCH_TICK_S if options.watch else 0.5)
        show(console, f"Stopped ({result.reason}) after {result.seconds:.0f}s; run directory: {run_dir}")
        for note in ctx.notes:
            show(console, f"  note: {note}")
        others = sorted(p.stem for p in (run_dir / "manifests").glob("*.json") if p.stem != ctx.host)
        if others:
            show(console, f"Hosts {', '.join(others)} also write to {run_dir}: this verdict covers what has been "
                          f"collected so far; run `perftracker analyze {run_dir}` once every node has stopped.")
        if not analyze:
            return
        try:
            analysis = api.analyze(run_dir, cache=False, analysis=api.AnalysisOptions(thresholds=overrides or {}))
        except PerftrackerError as exc:
            show(console, f"Nothing to analyze yet: {exc.message}")
            return
        write_and_say(analysis, run_dir / "perftracker-out", partial(print_run, console))
        raise typer.Exit(fail_on_exit(analysis.findings, threshold))
    finally:
        interrupts.restore()
        if publisher is not None:
            publisher.close()

