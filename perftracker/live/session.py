"""Run samplers side by side against a live job, show a live status, and stop cleanly.

Each sampler runs in its own thread; an exception in one becomes a note. The session ends at the duration,
when every worker exited, or on Ctrl-C / SIGTERM / SIGHUP (`Interrupts`); the samplers are then stopped and the host's
manifest written (with where attach's CPU went). A manifest that cannot be written is an OutputError. Stack
dumps can be asked for meanwhile (`RequestWatcher`).
Design notes: docs/internals/live.md.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from perftracker.collectors.counters.sched import stat_fields
from perftracker.errors import output_error
from perftracker.live.sampler import LiveContext, Sampler
from perftracker.rundir import MANIFEST, atomic_write_text, write_manifest

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100
# --watch's session loop looks this often (each look reads every worker's /proc/<pid>/stat: ~0.5 ms a second for 8
# ranks here at 1 s); Ctrl-C and SIGTERM interrupt its sleep at once, so only noticing the job's end waits for it
WATCH_TICK_S = 2.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupts:
    """While installed, SIGINT, SIGTERM and SIGHUP each raise KeyboardInterrupt in the session loop, as Ctrl-C does;
    while the session stops (`holding`) further signals are noted and ignored, so nothing is lost half-written.
    `received` is the first signal."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._holding = False
        self._previous: dict[int, Any] = {}

    def install(self) -> Interrupts:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Signals received inside are noted, not raised (the session is stopping)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def reason(self) -> str:
        """Why the session stopped, said as the session says it: "interrupted" for Ctrl-C, else the signal."""
        if self.received is None or self.received == signal.SIGINT:
            return "interrupted"
        return signal.Signals(self.received).name

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if not self._holding:
            raise KeyboardInterrupt


class RequestWatcher:
    """`kill -USR1 <attach pid>` and a new (or newly touched) `requests/stacks*` file in the run directory become
    `ctx.progress.hang_requested`; a file's modification time names the snapshot, so one `touch` in a shared run
    directory dumps every node's ranks into one folder. `close()` restores the previous SIGUSR1 handler."""

    def __init__(self, ctx: LiveContext) -> None:
        self.ctx = ctx
        self.folder = ctx.run_dir / "requests"
        self.seen: dict[str, int] = self._files()
        self._previous: Any = None
        self.signal_ready = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1")
        if self.signal_ready:
            self._previous = signal.signal(signal.SIGUSR1, self._on_signal)

    def _files(self) -> dict[str, int]:
        """name -> modification time (ns) of the request files there now."""
        found: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for path in self.folder.glob("stacks*"):
                found[path.name] = path.stat().st_mtime_ns
        return found

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.ctx.progress.requested_at = 0.0
        self.ctx.progress.hang_requested = True

    def poll(self) -> None:
        """Turn a new (or newly touched) `requests/stacks*` file into a request."""
        for name, mtime in self._files().items():
            if self.seen.get(name) != mtime:
                self.seen[name] = mtime
                self.ctx.progress.requested_at = mtime / 1e9  # every host names the snapshot alike
                self.ctx.progress.hang_requested = True

    def close(self) -> None:
        if self.signal_ready:
            signal.signal(signal.SIGUSR1, self._previous if self._previous is not None else signal.SIG_DFL)


@dataclass
class SessionResult:
    reason: str  # duration | job-exited | interrupted (Ctrl-C) | SIGTERM | SIGHUP
    seconds: float


def thread_cpu_s() -> dict[str, float]:
    """Python thread name -> its CPU seconds so far (threads of one name summed): where attach's own CPU went
    beyond its collectors' `sample` calls."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():  # utime + stime of each thread, from /proc
        fields = stat_fields(f"/proc/self/task/{thread.native_id}/stat") if thread.native_id is not None else None
        try:
            spent = (int(fields[11]) + int(fields[12])) / _TICKS if fields is not None else None
        except (IndexError, ValueError):
            spent = None
        if spent is not None:
            out[thread.name] = round(out.get(thread.name, 0.0) + spent, 3)
    return out


def _gc_passes() -> list[int]:
    """The cyclic collector's passes so far per generation (counted, not timed: a callback inside every pass would
    swallow a SIGTERM's KeyboardInterrupt)."""
    return [int(g["collections"]) for g in gc.get_stats()]


def _each(ctx: LiveContext, calls: Sequence[tuple[str, Callable[[LiveContext], None]]], failed: str) -> None:
    """Every (sampler name, its start or stop) called; one that raises becomes a note, the others go on."""
    for name, call in calls:
        try:
            call(ctx)
        except Exception as exc:  # a collector must never take the session down
            ctx.note(f"{name}: {failed} ({type(exc).__name__}: {exc})")


def _loop(sampler: Sampler, ctx: LiveContext, stop: threading.Event, cpu: dict[str, float]) -> None:
    while not stop.is_set():
        began = time.thread_time()
        try:
            sampler.sample(ctx)
        except Exception as exc:  # a collector must never take the session down
            ctx.note(f"{sampler.name}: {type(exc).__name__}: {exc}")
        cpu[sampler.name] = cpu.get(sampler.name, 0.0) + time.thread_time() - began
        stop.wait(sampler.interval_s)


def _panel(ctx: LiveContext, samplers: Sequence[Sampler], elapsed: float, duration: float | None) -> Table:
    alive = ctx.alive()
    table = Table(title=f"perftracker attach: {len(alive)}/{len(ctx.job.workers)} ranks alive, "
                        f"{elapsed:.0f}s" + (f" of {duration:.0f}s" if duration else "") + " (Ctrl-C to stop)",
                  title_justify="left", show_header=True)
    table.add_column("collector")
    table.add_column("status", overflow="fold")
    for s in samplers:
        table.add_row(s.name, s.status())
    steps = ctx.progress.steps
    if steps.last_step:
        med = steps.median_step_ns()
        rate = f"{1e9 / med:.2f} steps/s" if med else "?"
        table.add_row("steps", f"last step {max(steps.last_step.values())}, {rate}")
    if ctx.progress.suspicion:
        table.add_row("[bold red]suspicion[/]", escape(ctx.progress.suspicion))  # stack text is untrusted
    return table


def run_session(ctx: LiveContext, samplers: Sequence[Sampler], duration_s: float | None, console: Console,
                show_live: bool = True, stop_when: Callable[[], bool] | None = None,
                interrupts: Interrupts | None = None, tick_s: float = 0.5) -> SessionResult:
    """Run `samplers` until the duration, the job's end or a stop signal; the loop looks every `tick_s`."""
    started = time.monotonic()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    cpu: dict[str, float] = {}  # sampler -> CPU seconds its sample() calls took (its thread's own time)
    reason = "duration"
    requests = RequestWatcher(ctx)
    gc_before = _gc_passes()
    threads_cpu: dict[str, float] = {}
    frozen = False
    try:  # from the first sampler's start: a stop signal at any point still stops them all and writes manifests
        _each(ctx, [(s.name, s.start) for s in samplers], "could not start")
        for s in samplers:
            threads.append(threading.Thread(target=_loop, args=(s, ctx, stop, cpu), name=f"perftracker-{s.name}",
                                            daemon=True))
            threads[-1].start()
        frozen = duration_s is None  # a session until the job ends (--watch, run): hours of steady state
        if frozen:  # one collection, then what survived start-up is left out of the steady state's collections
            gc.collect()
            gc.freeze()
        live = Live(console=console, refresh_per_second=2, transient=False, auto_refresh=False) if show_live else None
        if live is not None:
            live.start()
        try:
            while True:
                elapsed = time.monotonic() - started
                if live is not None:
                    live.update(_panel(ctx, samplers, elapsed, duration_s), refresh=True)
                if duration_s is not None and elapsed >= duration_s:
                    break
                if stop_when is not None and stop_when():
                    reason = "job-exited"
                    break
                if not ctx.alive():
                    reason = "job-exited"
                    ctx.note("the job's processes exited while attached; everything collected until then is kept")
                    break
                if interrupts is not None and interrupts.received is not None:
                    raise KeyboardInterrupt  # its handler's own raise was lost (inside a gc callback, say)
                requests.poll()
                time.sleep(tick_s)
        finally:
            if live is not None:
                live.stop()
    except KeyboardInterrupt:
        reason = interrupts.reason() if interrupts is not None else "interrupted"
    finally:
        with interrupts.holding() if interrupts is not None else contextlib.nullcontext():
            threads_cpu = thread_cpu_s()  # before the samplers' threads end
            requests.close()
            stop.set()
            for t in threads:
                t.join(timeout=10)
            _each(ctx, [(s.name, s.stop) for s in samplers], "error while stopping")
            if frozen:
                gc.unfreeze()  # what follows (the analysis) collects as usual
            gc_passes = [now - then for now, then in zip(_gc_passes(), gc_before)]
            _write_manifests(ctx, samplers, reason, cpu, threads_cpu, gc_passes)
    return SessionResult(reason, time.monotonic() - started)


def _write_manifests(ctx: LiveContext, samplers: Sequence[Sampler], reason: str, cpu: dict[str, float],
                     threads_cpu: dict[str, float], gc_passes: list[int]) -> None:
    own = os.times()
    host_manifest = {
        "host": ctx.host, "job_run_id": ctx.job.run_id, "launcher_pid": ctx.job.launcher_pid,
        "ranks": sorted(w.rank for w in ctx.job.workers),
        "workers": [{"rank": w.rank, "local_rank": w.local_rank, "pid": w.pid, "cmdline": w.cmdline[:500]}
                    for w in ctx.job.workers],
        "collectors": [s.name for s in samplers], "started_ns": ctx.started_ns, "ended_ns": time.time_ns(),
        "ended_because": reason, "notes": list(ctx.notes),
        # where attach's CPU went: each collector's sample() calls, the whole process, its children (py-spy)
        "cpu_s": {"collectors": {name: round(cpu.get(name, 0.0), 4) for name in (s.name for s in samplers)},
                  "process": round(own.user + own.system, 3),
                  "children": round(own.children_user + own.children_system, 3),
                  "threads": threads_cpu,  # each thread's own CPU (/proc): wake-ups and overhead included
                  "gc": {"passes": gc_passes}},  # the cyclic collector's passes per generation during the session
    }
    path = ctx.run_dir / "manifests" / f"{ctx.host}.json"
    try:
        atomic_write_text(path, json.dumps(host_manifest, indent=1) + "\n")
        path = ctx.run_dir / MANIFEST
        write_manifest(ctx.run_dir, job=ctx.job.run_id or f"pid {ctx.job.launcher_pid}", created_by="perftracker attach")
    except OSError as exc:
        raise output_error(path, exc) from None
