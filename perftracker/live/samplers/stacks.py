"""Python stacks of every rank with py-spy, and automatic hang dumps; the job is never paused by default.

`StackSampler` takes a non-blocking `py-spy dump` of each rank every `interval_s` into `stacks/<UTC time>/`,
and a blocking native dump of every rank at `stacks_at`, on request, and when `ctx.diagnosis` says the steps
stalled or two alike rounds look hung (`<time>-hang/`, with `ctx.progress.suspicion`). Failures become notes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftracker.collectors.stacks.snapshots import main_stack
from perftracker.live.attach.discovery import Worker
from perftracker.live.diagnosis import Look
from perftracker.live.sampler import LiveContext
from perftracker.rundir import atomic_write_text
from perftracker.store.stack_frames import MainStack

DUMP_FLAGS = {"nonblocking": ["--nonblocking"], "native": ["--native"], "blocking": []}  # py-spy dump, by mode
PERMISSION_HINT = ("run attach as the job's user or as root; in a container add CAP_SYS_PTRACE and share the "
                   "job's PID namespace; with kernel.yama.ptrace_scope >= 1 a same-user attach needs root")


def find_pyspy() -> str | None:
    """py-spy on PATH, else next to this Python (a venv's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.is_file() else None


def snapshot_name(epoch_s: float, suffix: str = "") -> str:
    """Folder name of a snapshot: UTC time with milliseconds, e.g. 20250101T120000.123Z[-hang]."""
    whole = int(epoch_s)
    ms = round((epoch_s - whole) * 1000)
    if ms == 1000:
        whole, ms = whole + 1, 0
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(whole)) + f".{ms:03d}Z" + (f"-{suffix}" if suffix else "")


def main_thread_switches(pid: int) -> int | None:
    """Voluntary context switches of a process's main thread (None when /proc does not say): a thread
    blocked for good in one wait does not switch; one that sleeps or syncs in a loop switches often."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return None


@dataclass(slots=True, eq=False)
class StackSampler:
    name = "stacks"
    timeout_s = 10.0
    native_timeout_s = 30.0
    interval_s: float = 15.0
    stacks_at: float | None = None
    trigger_s: float = 0.25  # how often requests, --stacks-at and stalled steps are checked
    confirm_s: float = 3.0
    pyspy: str | None = None
    rounds_while_stepping: bool = True  # --watch: False, a periodic round only when no step came since the last look
    rounds: int = field(default=0, init=False)
    hang_dumps: int = field(default=0, init=False)
    requested_dumps: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    skipped: int = field(default=0, init=False)
    last_round_s: float = field(default=0.0, init=False)
    state: str = field(default="not started", init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _watcher: threading.Thread | None = field(default=None, init=False)
    _previous: Look = field(default_factory=dict, init=False)
    _previous_at_ns: int = field(default=0, init=False)
    _confirm_at: float = field(default=0.0, init=False)
    _armed: bool = field(default=True, init=False)
    _at_done: bool = field(default=False, init=False)
    _looked_ns: int = field(default=0, init=False)

    # -- Sampler protocol ---------------------------------------------------------------------
    def start(self, ctx: LiveContext) -> None:
        self.pyspy = self.pyspy or find_pyspy()
        if self.pyspy is None:
            self.state = "py-spy not installed"
            ctx.note("stacks: py-spy is not installed (pip install py-spy); no stacks and no hang diagnosis, "
                     "the other collectors carry on")
            return
        self.state = f"every {self.interval_s:g}s, non-blocking"
        if self.stacks_at is not None and self.stacks_at < time.time() - 60:
            ctx.note(f"stacks: --stacks-at {self.stacks_at:.0f} is more than a minute in the past; not taken")
            self._at_done = True
        self._watcher = threading.Thread(target=self._watch, args=(ctx,), name="perftracker-stacks-watch",
                                         daemon=True)
        self._watcher.start()

    def sample(self, ctx: LiveContext) -> None:
        if self.pyspy is None:
            return
        looked, self._looked_ns = self._looked_ns, time.time_ns()
        if not self.rounds_while_stepping and self._progressed_since(ctx, looked):
            self.skipped += 1  # steps came: no stack hang can be (new steps veto it), and the step rule watches
            return
        with self._lock:
            self._periodic(ctx)

    def stop(self, ctx: LiveContext) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=self.native_timeout_s + 5)

    def status(self) -> str:
        counts = ((self.skipped, "periodic round(s) left out while steps came"), (self.hang_dumps, "hang dump(s)"),
                  (self.requested_dumps, "requested dump(s)"), (self.failures, "failed dump(s)"))
        return f"{self.rounds} round(s), last {self.last_round_s * 1000:.0f} ms; {self.state}" + "".join(
            f"; {n} {what}" for n, what in counts if n)

    # -- triggers ------------------------------------------------------------------------------
    def _watch(self, ctx: LiveContext) -> None:
        while not self._stop.is_set():
            wait = self.trigger_s
            if self.stacks_at is not None and not self._at_done:
                wait = max(0.0, min(wait, self.stacks_at - time.time()))
            self._stop.wait(wait)
            if self._stop.is_set():
                return
            try:
                with self._lock:
                    self._triggers(ctx)
            except Exception as exc:  # noqa: BLE001  never into the session; the periodic rounds go on
                ctx.note(f"stacks: {type(exc).__name__}: {exc}")

    def _triggers(self, ctx: LiveContext) -> None:
        now = time.time()
        if self.stacks_at is not None and not self._at_done and now >= self.stacks_at:
            self._at_done = True
            self._dump_round(ctx, "nonblocking", snapshot_name(self.stacks_at, "at"))
        if ctx.progress.hang_requested:
            ctx.progress.hang_requested = False
            self._requested_dump(ctx)
        with ctx.lock:  # the diagnosis' suspicion text when the steps stopped coming ("" when they come)
            med = ctx.progress.steps.median_step_ns()
            last = max(ctx.progress.steps.last_step_ns.values()) if ctx.progress.steps.last_step_ns else None
            known = ctx.progress.steps.known
        stalled = ctx.diagnosis.step_stall(time.time_ns() - last if last is not None else None, med, known)
        if stalled == "":
            self._armed = True  # progress again: a later stall gets its own hang dump
        if stalled and self._armed:
            self._hang_dump(ctx, stalled)
        if self._confirm_at and time.monotonic() >= self._confirm_at:
            self._confirm_at = 0.0
            self._periodic(ctx, confirming=True)

    def _progressed_since(self, ctx: LiveContext, since_ns: int) -> bool:
        with ctx.lock:
            return any(ns > since_ns for ns in ctx.progress.steps.last_step_ns.values())

    def _periodic(self, ctx: LiveContext, confirming: bool = False) -> None:
        started_ns = time.time_ns()
        if not confirming:  # this round is the re-check a pending one asked for (a quick one now, right after
            self._confirm_at = 0.0  # it, would compare two looks too close to show that anything stayed still)
        look = self._dump_round(ctx, "nonblocking", snapshot_name(started_ns / 1e9))
        if not look:
            return
        diagnosis = ctx.diagnosis
        pattern = diagnosis.hang_pattern(look)
        same = bool(self._previous) and diagnosis.same_picture(self._previous, look)
        moving = (self._progressed_since(ctx, self._previous_at_ns) if self._previous_at_ns else False) or (
            same and not diagnosis.stayed_blocked(self._previous, look, (started_ns - self._previous_at_ns) / 1e9))
        if pattern and same and not moving:
            if self._armed:
                self._hang_dump(ctx, pattern)
        elif pattern and not moving and not confirming:  # one quick re-check per round, no chain
            self._confirm_at = time.monotonic() + min(self.confirm_s, self.interval_s)
        elif not pattern or moving:
            if not self._armed:  # the job moved on after a hang dump: it was not a hang
                with ctx.lock:
                    ctx.progress.suspicion = ""
            self._armed = True
        self._previous, self._previous_at_ns = look, started_ns

    def _hang_dump(self, ctx: LiveContext, why: str) -> None:
        """One blocking native dump of every rank, not repeated until progress resumes."""
        self._armed = False
        look = self._dump_round(ctx, "native", snapshot_name(time.time(), "hang"))
        self.hang_dumps += 1  # counted once written: a reader of the count finds the files
        detail = ctx.diagnosis.hang_pattern(look) if look else ""
        text = f"hang? {why}" + (f" | native stacks: {detail}" if detail and detail != why else "")
        with ctx.lock:
            ctx.progress.suspicion = text[:300]
        ctx.note(f"stacks: {text[:300]}; native stacks of every rank in stacks/")

    def _requested_dump(self, ctx: LiveContext) -> None:
        """One native dump of every rank because the user asked (`<time>-request`: one explicit look, which
        the hang analyzer judges as such, not as a stall)."""
        name = snapshot_name(ctx.progress.requested_at or time.time(), "request")
        look = self._dump_round(ctx, "native", name)
        self.requested_dumps += 1  # counted once written: a reader of the count finds the files
        ctx.note(f"stacks: dump requested: native stacks of {len(look)} rank(s) in stacks/{name}/")

    # -- dumping -------------------------------------------------------------------------------
    def dump_into(self, ctx: LiveContext, mode: str, folder: Path) -> dict[int, MainStack]:
        """One round of dumps (`nonblocking` or `native`) of every live worker into `folder/rank-<r>.json` (the
        watcher's incidents); rank -> its main thread. Needs `start` to have found py-spy."""
        if self.pyspy is None:
            return {}
        with self._lock:
            return self._dump_round(ctx, mode, "", folder)

    def _dump_round(self, ctx: LiveContext, mode: str, snapshot: str, folder: Path | None = None) -> dict[int, MainStack]:
        """Dump every live worker at once; write what worked; rank -> its main thread."""
        folder = folder or ctx.run_dir / "stacks" / snapshot
        workers = ctx.alive()
        if not workers:
            return {}
        began = time.monotonic()
        results = self._run_dumps(ctx, workers, mode)
        if mode == "native":  # native unwinding can fail where plain dumps work: retry those blocking
            retry = [w for w in workers if w.rank not in results]
            results.update(self._run_dumps(ctx, retry, "blocking"))
        look: dict[int, MainStack] = {}
        for w in workers:
            if w.rank not in results:
                continue
            ts_ns, used, threads = results[w.rank]
            switches = main_thread_switches(w.pid)
            record = {"rank": w.rank, "pid": w.pid, "host": ctx.host, "ts_ns": ts_ns, "mode": used,
                      "world_size": w.world_size, "switches": switches, "threads": threads}
            atomic_write_text(folder / f"rank-{w.rank}.json",
                              json.dumps(record, separators=(",", ":")) + "\n")
            main = main_stack(w.rank, ctx.host, w.pid, threads, switches)
            if main is not None:
                look[w.rank] = main
        self.rounds += 1
        self.last_round_s = time.monotonic() - began
        return look

    def _run_dumps(self, ctx: LiveContext, workers: list[Worker],
                   mode: str) -> dict[int, tuple[int, str, list[dict[str, Any]]]]:
        assert self.pyspy is not None
        timeout = self.native_timeout_s if mode != "nonblocking" else self.timeout_s
        started: list[tuple[Worker, int, subprocess.Popen[str]]] = []
        for w in workers:
            try:
                proc = subprocess.Popen([self.pyspy, "dump", "--pid", str(w.pid), "--json", *DUMP_FLAGS[mode]],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            except OSError as exc:
                ctx.note(f"stacks: could not run py-spy ({exc})")
                return {}
            started.append((w, time.time_ns(), proc))
        deadline = time.monotonic() + timeout
        out: dict[int, tuple[int, str, list[dict[str, Any]]]] = {}
        for w, ts_ns, proc in started:
            try:
                stdout, stderr = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                self.failures += 1
                ctx.note(f"stacks: py-spy took longer than {timeout:g}s on rank {w.rank} (pid {w.pid}); skipped")
                continue
            threads = self._parse(ctx, w, mode, proc.returncode, stdout, stderr)
            if threads is not None:
                out[w.rank] = (ts_ns, mode, threads)
        return out

    def _parse(self, ctx: LiveContext, w: Worker, mode: str, rc: int, stdout: str,
               stderr: str) -> list[dict[str, Any]] | None:
        if rc == 0:
            try:
                data = json.loads(stdout)
            except ValueError:
                data = None
            if isinstance(data, list):
                return [t for t in data if isinstance(t, dict)]
        self.failures += 1
        low = stderr.lower()
        if "permission" in low or "operation not permitted" in low:
            self.state = "permission denied"
            ctx.note(f"stacks: not allowed to read the memory of rank {w.rank} (pid {w.pid}): {PERMISSION_HINT}")
        elif any(s in low for s in ("no such process", "no such file", "check that the process is running")):
            pass  # the rank exited between the liveness check and the dump: the others go on
        elif mode == "native":
            pass  # native unwinding unsupported here: the caller retries with a plain blocking dump
        else:
            first = next((ln for ln in stderr.splitlines() if ln.strip()), f"exit status {rc}")
            ctx.note(f"stacks: py-spy failed on rank {w.rank} (pid {w.pid}): {first[:200]}")
        return None
