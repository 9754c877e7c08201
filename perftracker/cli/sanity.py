"""`perftracker sanity`: measure every node of a job before the job starts, and name the ones to leave out.

Launched the way the job is; the launch is checked first, every rank measures within `--time-box`, and one
rank writes OUT (rank 0, or a rank that took over its lapsed lease: `write_outputs`, the scheduler's files made by
`scheduler_files`). Exit 0, 3 (`--fail-on`), 2, or 1 when the ranks could not join. Details: docs/internals/core.md.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from perftracker.analyzers.findings import Severity
from perftracker.analyzers.sanity.judge import SanityVerdict, cut_short, judge
from perftracker.analyzers.sanity.results import SanityResults
from perftracker.analyzers.sanity.table import FIGURE_LABELS
from perftracker.api import writing
from perftracker.cli import options as opt
from perftracker.cli.lint_env import lint
from perftracker.cli.voice import EXIT_USAGE, fail_on_exit, parse_fail_on, say
from perftracker.collectors.sanity import DEFAULT_S, QUICK_S, join_s
from perftracker.errors import PerftrackerError, UsageError
from perftracker.output_dir import replace_tables
from perftracker.reports import json_report
from perftracker.reports.sections import sanity_section
from perftracker.rundir import atomic_write_text, host_name

AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE"  # torchrun's agent hosts the store: it listens before any rank
CHECK_FAILED = 1  # the ranks could not join: nothing was measured


def sanity(
    out: Annotated[Path, opt.out_option("Folder rank 0 writes the report, findings and exclude lists into.")],
    quick: Annotated[bool, typer.Option("--quick", help=f"A short check: a {QUICK_S:g} s time box.")] = False,
    time_box: Annotated[float | None, typer.Option("--time-box", metavar="S",
                                                   help=f"Seconds the check may take (default {DEFAULT_S:g}).")] = None,
    fail_on: opt.FailOn = None,
    exclude_at: Annotated[str, typer.Option("--exclude-at", metavar="warning|critical",
                                            help="Exclude nodes with a finding at or above this severity.")] = "critical",
    profile: Annotated[str, opt.nccl_profile_option("NCCL setting lint's platform profile.")] = "generic",
    sysfs_root: Annotated[Path, opt.sysfs_root_option("Root of sysfs for the node's links.")] = Path("/sys"),
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
    from perftracker.collectors.sanity.launch import Launch, RendezvousError, check_rendezvous

    launch = Launch.from_env(os.environ)  # before torch: a bad launch is said at once
    agent_store = os.environ.get(AGENT_STORE_VAR) == "True"  # listening before any rank starts: the box applies
    try:  # else rank 0 starts the store itself, maybe later than this rank: the join's wait (measure.plan_for)
        check_rendezvous(launch, box if agent_store else join_s(box), store_up=launch.rank != 0 or agent_store)
    except RendezvousError as exc:
        _fail(f"rank {launch.rank}: {exc}; check MASTER_ADDR / MASTER_PORT (or torchrun's --master-addr / "
              "--rdzv-endpoint) and that the first node is up")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # torch's C++ retries and stack traces: we say why
    # torch only now: every other command (and this one's --help) starts without it
    from perftracker.collectors.sanity.comm import Comm
    from perftracker.collectors.sanity.measure import WATCHDOG_END, device_for, measure, new_record, plan_for
    from perftracker.collectors.sanity.node import node_facts

    if launch.rank == 0:
        opt.writable_folder(out)
    host = host_name()
    device = device_for(launch.local_rank)
    plan = plan_for(box, device)
    node = {}
    if launch.local_rank == 0:
        node = node_facts(sysfs_root, with_gpus=device.type == "cuda")
        node["lint"] = [f.to_dict() for f in lint(profile=profile, sysfs_root=sysfs_root, host=host)[0]]
    comm: Comm | None = None
    try:
        comm = Comm.start(launch, device, host, plan.timeout_s, plan.join_s)
    except (RuntimeError, ValueError) as exc:
        _fail(f"rank {launch.rank}: the {launch.world} ranks did not all join at {launch.master_addr}:"
              f"{launch.master_port} within {plan.join_s:g} s ({str(exc).splitlines()[0][:160] if str(exc) else ''})"
              "; check that every node was launched with the same --nnodes / WORLD_SIZE and rendezvous")
    assert comm is not None
    if launch.world > 1:
        typer.echo(f"perftracker sanity: rank {launch.rank} joined ({launch.world} ranks, {len(comm.nodes)} nodes)",
                   err=True)
    record = new_record(launch, host, device)
    ending = _Ending(comm, launch, record, out, box, exclude_sev, threshold, started)
    watchdog = threading.Timer(max(0.0, comm.joined_at + WATCHDOG_END * box - time.monotonic()), ending.watchdog)
    watchdog.daemon = True
    if launch.world > 1:  # alone, nothing can hold the measurement beyond its phases' own ends
        watchdog.start()
    measure(launch, plan, host, node, device, started, record, comm)
    watchdog.cancel()
    code, broken = ending.finish()
    if launch.world <= 1 and not broken:
        raise typer.Exit(code)
    # a rank of a group leaves without the interpreter's teardown: torch's gloo group can abort the process in its
    # destructors (exit -6 on a rank whose work was done: when a peer died, or the writer's lease thread still used
    # the store), and the check's result is already written and said
    _exit_now(code)


class _Ending:
    """The command's end, run once: by the main thread after measuring, or by the watchdog at the end of the
    box with what was measured (the main thread then waits in a collective; the watchdog ends the process)."""

    def __init__(self, comm: Any, launch: Any, record: dict[str, Any], out: Path, box: float,
                 exclude_sev: Severity, threshold: Severity | None, started: float) -> None:
        self.comm, self.launch, self.record, self.out, self.box = comm, launch, record, out, box
        self.exclude_sev, self.threshold, self.started = exclude_sev, threshold, started
        self._lock = threading.Lock()  # held through the one run of `_finish`: a second caller waits for its result
        self._started = False
        self.result = (0, False)
        from perftracker.collectors.sanity.handover import Lease

        self.lease = Lease(comm) if launch.rank == 0 and comm.store is not None else None

    def watchdog(self) -> None:
        from perftracker.collectors.sanity.measure import WATCHDOG_END

        self.record["cut"].append(f"the watchdog ended the measurement {WATCHDOG_END * self.box:.1f} s into the "
                                  f"{self.box:g} s box (a phase was still waiting for a peer)")
        self.record.setdefault("elapsed_s", round(time.monotonic() - self.comm.joined_at, 3))
        try:
            code, _ = self.finish()
        except PerftrackerError as exc:
            say(exc.message)
            code = EXIT_USAGE
        _exit_now(code)

    def finish(self) -> tuple[int, bool]:
        with self._lock:
            if not self._started:
                self._started = True
                self.result = self._finish()
        return self.result

    def _finish(self) -> tuple[int, bool]:
        from perftracker.collectors.sanity import handover
        from perftracker.collectors.sanity.measure import GATHER_END, HARD_END

        comm, launch, record = self.comm, self.launch, self.record
        gather_end = comm.joined_at + GATHER_END * self.box
        broken = bool(record["errors"]) and launch.world > 1
        if launch.rank != 0:
            handover.post(comm, record)
            taken = handover.wait_for_writer(comm, record, gather_end, comm.joined_at + HARD_END * self.box)
            if taken is None:  # the writer wrote (or is alive and writes): this rank never writes OUT
                return 0, broken
            gathered, self.lease = taken
            how = "its lease in the store lapsed" if self.lease is not None else "its node's store is gone too"
            say(f"sanity: rank 0 is gone ({how}); rank {launch.rank} ({comm.hosts[launch.rank]}) writes the result")
            opt.writable_folder(self.out)
        else:
            won = handover.claim(comm) if comm.store is not None else True
            if won is None and "others" in comm.groups:
                say("sanity: the rendezvous store is gone; a rank on another node writes the result")
                return 0, True
            if won is False:
                say("sanity: another rank took the writer's place (rank 0's lease had lapsed); it writes the result")
                return 0, True
            gathered = handover.gather(comm, record, gather_end) if comm.store is not None else {0: record}
        return self._write(gathered), broken or len(gathered) < launch.world

    def _write(self, gathered: dict[int, dict[str, Any]]) -> int:
        from perftracker.collectors.sanity import handover

        comm, launch = self.comm, self.launch
        hosts = comm.hosts if comm.hosts else [host_name()] * launch.world
        results = SanityResults(hosts=hosts, records=gathered, time_box_s=self.box,
                                elapsed_s=round(time.monotonic() - comm.joined_at, 3))
        verdict = judge(results, self.exclude_sev)
        try:
            write_outputs(self.out, results, verdict)
        finally:
            if self.lease is not None:
                self.lease.stop()
        handover.mark_written(comm)
        handover.wait_left(comm, sorted(gathered))
        if set(hosts) - {str(r.get("host")) for r in gathered.values()}:  # a node died: its agent cannot arrive
            handover.release_agents(comm)
        worst = [f for f in verdict.findings if f.severity >= Severity.WARNING]
        typer.echo(f"perftracker sanity: {len(dict.fromkeys(hosts))} node(s) of {launch.world} rank(s), "
                   f"{len(worst)} warning(s) or worse; exclude: {', '.join(verdict.exclude) or 'none'}; "
                   f"{self.out / 'report.html'} ({results.elapsed_s:.1f} s)", err=True)
        return fail_on_exit(verdict.findings, self.threshold)


def _fail(message: str) -> None:
    """The check could not be made: say why on one line, exit CHECK_FAILED (never a pass, never a traceback)."""
    say(f"sanity: {message}")
    _exit_now(CHECK_FAILED)


def _exit_now(code: int) -> None:
    """Flush what was said, then end the process with `code` at once (no interpreter teardown)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _note(results: SanityResults) -> str:
    records = list(results.records.values())
    parts = [f"{len(dict.fromkeys(results.hosts))} nodes, {len(results.hosts)} ranks; checked in "
             f"{results.elapsed_s:.1f} s (time box {results.time_box_s:g} s)."]
    for key in ("allreduce_busbw_gbps", "allgather_busbw_gbps", "allreduce_lat_us", "node_allreduce_busbw_gbps",
                "inter_allreduce_busbw_gbps", "inter_allreduce_lat_us"):
        values = sorted(float(r["figures"][key]) for r in records if key in r.get("figures", {}))
        if values:
            parts.append(f"{FIGURE_LABELS[key]}: {values[len(values) // 2]:.3g} (median over ranks).")
    if results.synthetic:
        parts.append(f"SYNTHETIC figures: {results.synthetic}.")
    return " ".join(parts)


def scheduler_files(verdict: SanityVerdict, hosts: list[str]) -> dict[str, str]:
    """exclude.txt, slurm_exclude.txt and hostfile (file name -> text), from the judgement's lists."""
    slots = Counter(hosts)
    return {"exclude.txt": "".join(f"{h}\n" for h in verdict.exclude),
            "slurm_exclude.txt": f"--exclude={','.join(verdict.exclude)}\n" if verdict.exclude else "",
            "hostfile": "".join(f"{h} slots={slots[h]}\n" for h in verdict.keep)}


def _atomic(path: Path, text: str) -> None:
    with writing(path):
        atomic_write_text(path, text)


def write_outputs(out: Path, results: SanityResults, verdict: SanityVerdict) -> None:
    """OUT: the table, sanity.json, report.html, the scheduler's files and, last, findings.json, each atomically."""
    findings_file = out / "findings.json"
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        findings_file.unlink(missing_ok=True)  # an earlier check's verdict never stands beside this one's files
    with writing(out / "tables"):
        replace_tables({"sanity_devices": pd.DataFrame(verdict.rows)}, out / "tables")
    _atomic(out / "sanity.json", json.dumps(results.to_dict(), separators=(",", ":")) + "\n")  # C encoder: fast
    summary = {"command": "sanity", "nodes": len(dict.fromkeys(results.hosts)), "ranks": len(results.hosts),
               "exclude": verdict.exclude, "keep": verdict.keep, "node_status": verdict.node_status,
               "elapsed_s": results.elapsed_s, "time_box_s": results.time_box_s, "cut": cut_short(results)}
    section = sanity_section(verdict.rows, FIGURE_LABELS, _note(results))
    synthetic = [{"path": ".", "what": results.synthetic, "made_by": ""}] if results.synthetic else None
    from perftracker.reports import html  # plotly and Jinja only when a page is rendered

    with writing(out / "report.html"):
        html.render(out / "report.html", verdict.findings, [], [section], title="perftracker sanity check",
                    synthetic=synthetic)
    for name, text in scheduler_files(verdict, results.hosts).items():
        _atomic(out / name, text)
    with writing(findings_file):
        json_report.write(findings_file, json_report.build(verdict.findings, [], "sanity", summary))
