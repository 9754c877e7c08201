"""`perftracker analyze PATH -o OUT`: load traces / step files, run the analyzers, write the report."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from perftracker import api
from perftracker import option_checks as checks
from perftracker.analyzers.efficiency.devices import device_table
from perftracker.analyzers.findings import Finding
from perftracker.cli import options as opt
from perftracker.cli.progress import parsing_progress
from perftracker.cli.voice import fail_on_exit, parse_fail_on, print_run, show, terminal, write_and_say
from perftracker.errors import UsageError
from perftracker.output_names import TIMELINE
from perftracker.rundir import atomic_write_text, host_name

JOBS_INDEX = "jobs.json"


def analyze(
    path: Annotated[Path, typer.Argument(help="A run directory, a folder of torch.profiler traces (.json/.json.gz, "
                                         "one per rank), or one trace file.")],
    out: Annotated[Path, opt.out_option("Where to write report.html, findings.json and tables/.")]
    = Path("perftracker-out"),
    fail_on: opt.FailOn = None,
    hta_compat: Annotated[bool, typer.Option("--hta-compat", help="Use Holistic Trace Analysis' definitions for "
                                             "the breakdown and overlap (drop the last step; overlapped communication "
                                             "counts as compute).")] = False,
    comm_kernel: Annotated[list[str] | None, typer.Option("--comm-kernel", help="Regex of extra GPU kernel names "
                                                          "that are communication (custom collectives); "
                                                          "repeatable.")] = None,
    comm_kernels: Annotated[list[Path] | None, typer.Option(
        "--comm-kernels", envvar="PERFTRACKER_COMM_KERNELS",
        help="A TOML file of communication kernel name patterns by library, in the format of the shipped "
             "perftracker/data/comm_kernels.toml (which NCCL, RCCL, MSCCL++, DeepEP, userbuffers, oneCCL, HCCL "
             "and symmetric-memory kernels already match); repeatable.")] = None,
    profile: Annotated[str | None, opt.nccl_profile_option("NCCL platform profile for the configuration rules: a "
                                                       "shipped name (generic, pai-lingjun) or a JSON file.")]
    = None,
    sysfs_root: Annotated[Path | None, opt.sysfs_root_option("Check NCCL settings against this node's RDMA/network "
                                                         "sysfs (e.g. /sys) when analyzing on the node.")] = None,
    no_cache: opt.NoCache = False,
    workers: Annotated[int, typer.Option("--workers", help="Parallel parser processes (0: one per CPU); with "
                                         "--engine ray and no cluster, the CPUs of the Ray it starts.")] = 0,
    engine: opt.Engine = "local",
    ray_address: opt.RayAddress = None,
    timeline: Annotated[bool, typer.Option("--timeline", help="Also write timeline.json.gz beside the "
                                           "report: all ranks on one clock-aligned trace with the findings marked "
                                           "(as `perftracker timeline` writes it), linked from the report.")] = False,
    quiet: opt.QuietVerdict = False,
    job: Annotated[str | None, typer.Option("--job", help="Where the traces are of several jobs: analyze only "
                                            "the one with this label (as the refusal lists them, e.g. job2 or "
                                            "job2-w8-a100-sxm4-80gb).")] = None,
    each_job: Annotated[bool, typer.Option("--each-job", help="Where the traces are of several jobs: analyze each "
                                           "alone into OUT/<label>/, with an index in OUT/jobs.json.")] = False,
    devices: Annotated[list[Path] | None, typer.Option(
        "--devices", envvar="PERFTRACKER_DEVICES",
        help="A TOML file of GPU peak figures (dense TFLOPS by dtype, memory bandwidth), in the format of the shipped "
             "perftracker/data/devices.toml, matched before it; repeatable.")] = None,
    nvtx_step: Annotated[str, typer.Option("--nvtx-step", help="Nsight Systems exports: the NVTX range name that "
                                           "marks one training step (numbered in order), where the job has no "
                                           "ProfilerStep#N / iteration N ranges.")] = "",
    set_threshold: opt.SetThresholds = None,
    thresholds_file: opt.ThresholdsFiles = None,
    follow_links: opt.FollowLinks = False,
) -> None:
    """Analyze traces and step files; print the verdict and ranked findings; write the report.

    Traces of different jobs (world size, process groups, job id, devices, or times days apart) are never
    compared: analyze refuses them (exit 2) unless --job picks one or --each-job analyzes each alone.

    Exit codes: 0 ran, 2 bad input or usage (traces of several jobs included; an -o that cannot be written,
    after the verdict when the analysis finished), 3 a finding at or above --fail-on exists (in any job,
    with --each-job).

    Examples:
      perftracker analyze traces/ -o out/
      perftracker analyze run/ -o out/ --timeline --fail-on warning
      perftracker analyze traces/ -o out/ --set straggler.alpha=0.005
    """
    threshold = parse_fail_on(fail_on)
    if job and each_job:
        raise UsageError("--job and --each-job exclude each other", "analyze",
                         "pick one job with --job, or all of them with --each-job")
    patterns = checks.patterns(comm_kernel)  # each regular expression checked as the API checks it
    device_files = tuple(devices or ())
    device_table(device_files)  # a bad file is said now (exit 2), before any parsing
    chosen = api.AnalysisOptions(hta_compat=hta_compat, device_files=device_files,
                                 thresholds=opt.threshold_overrides(set_threshold, thresholds_file))
    opt.output_folder(out)
    options: dict[str, Any] = dict(
        comm_kernel_patterns=patterns, comm_kernel_files=tuple(comm_kernels or ()), cache=not no_cache,
        workers=workers, engine=opt.checked_engine(engine), ray_address=ray_address or "", nccl_profile=profile,
        sysfs_root=sysfs_root, sysfs_host=host_name() if sysfs_root is not None else "", job=job,
        nsys_step_range=nvtx_step, follow_links=follow_links)
    console = terminal()
    if each_job:
        with parsing_progress(quiet) as progress:
            findings = _analyze_each_job(console, path, out, {**options, "progress": progress}, chosen, quiet,
                                         timeline)
        raise typer.Exit(fail_on_exit(findings, threshold))
    with parsing_progress(quiet) as progress:
        result = api.analyze(path, analysis=chosen, timeline=timeline, progress=progress, **options)
    write_and_say(result, out, partial(_print_result, console, quiet))
    raise typer.Exit(fail_on_exit(result.findings, threshold))


def _print_result(console: Console, quiet: bool, result: api.Run, written: bool) -> None:
    """The run as `write_and_say` tells it: its verdict (`--quiet`), or its findings and where its files are."""
    if quiet:
        show(console, result.verdict)
        return
    print_run(console, result, written)
    timeline = result.report_path.parent / TIMELINE
    if written and timeline.is_file():
        show(console, f"Timeline: {timeline} (all ranks, clock-aligned; open it in ui.perfetto.dev)")


def _analyze_each_job(console: Console, path: Path, out: Path, options: dict[str, Any],
                      chosen: api.AnalysisOptions, quiet: bool, timeline: bool) -> list[Finding]:
    """Each job under `path` analyzed alone into OUT/<label>/ (OUT itself when there is one job), then an
    index: the terminal listing and OUT/jobs.json."""
    everything: list[Finding] = []
    index: list[dict[str, object]] = []
    jobs = api.analyze_jobs(path, analysis=chosen, timeline=timeline, **options)
    for group, result in jobs:
        label = group.label if group is not None and len(jobs) > 1 else ""
        if label and group is not None:
            show(console, f"== {group.describe()}")
        write_and_say(result, out / label if label else out, partial(_print_result, console, quiet))
        everything.extend(result.findings)
        index.append({"label": label or "job1", "description": group.describe() if group else "",
                      "files": group.paths if group else [], "out": str(result.out_dir),
                      "verdict": result.verdict, "counts": result.summary.counts})
    if len(jobs) > 1:
        with api.writing(out / JOBS_INDEX):
            atomic_write_text(out / JOBS_INDEX, json.dumps({"input": str(path), "jobs": index}, indent=2) + "\n")
        show(console, f"{len(jobs)} jobs, each analyzed alone (index: {out / JOBS_INDEX}):")
        for entry in index:
            show(console, f"  {entry['label']}: {entry['verdict']} -> {entry['out']}")
    return everything
