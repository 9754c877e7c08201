"""Sample every rank's stacks for a few seconds with `py-spy record`, so an unprepared job's straggler shows.

Once, `delay_s` after the start, one non-blocking `py-spy record` per rank, side by side, into
`profiles/rank-<r>.txt` with a `.json` sidecar; stopped early, the recorders write what they have. When they
end, the panel's suspicion is `ctx.diagnosis.straggler_suspicion` of them. `BurstRound`, one such recording of
every rank, is also the stack-steps sampler's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from perftracker.collectors.stacks.chrometrace import read_burst
from perftracker.collectors.stacks.samples import load_profile_inputs
from perftracker.errors import InputError
from perftracker.live.attach.discovery import Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.stacks import PERMISSION_HINT, find_pyspy
from perftracker.rundir import atomic_write_text
from perftracker.store.stack_frames import StackBurst

WAIT_GRACE_S = 5.0  # beyond its duration, a burst's recorder gets this long before it is interrupted


@dataclass
class Recording:
    """One rank's `py-spy record` under way."""

    rank: int
    pid: int
    proc: subprocess.Popen[bytes]
    out: Path
    started_ns: int


@dataclass(slots=True, eq=False)
class BurstRound:
    """One `py-spy record` of every rank side by side, in format `fmt` into `folder/rank-<r><suffix>`: start, poll
    `done` until it is, then `read` the bursts (or `stop` early)."""

    pyspy: str
    seconds: int
    rate_hz: int
    folder: Path
    fmt: str = "chrometrace"
    suffix: str = ".chrometrace.json"
    grace_s: float | None = WAIT_GRACE_S  # None: never interrupted before `stop`
    started_ns: int = field(default=0, init=False)
    recorders: list[Recording] = field(default_factory=list, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    def start(self, workers: list[Worker]) -> None:
        self.started_ns = time.time_ns()
        for w in workers:
            out = self.folder / f"rank-{w.rank}{self.suffix}"
            try:  # never pausing the rank; in a session of its own, so a SIGTERM or SIGHUP sent to attach's process
                # group does not kill it before it is asked to write what it has
                proc = subprocess.Popen([self.pyspy, "record", "--pid", str(w.pid), "--rate", str(self.rate_hz),
                                         "--duration", str(self.seconds), "--nonblocking", "--idle", "--threads",
                                         "--format", self.fmt, "--output", str(out)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                self.errors.append(f"could not start py-spy for rank {w.rank} ({exc})")
                continue
            self.recorders.append(Recording(w.rank, w.pid, proc, out, time.time_ns()))

    def done(self) -> bool:
        """Every recorder ended; one still running `grace_s` past its duration is interrupted first."""
        if self.grace_s is not None and time.time_ns() > self.started_ns + int((self.seconds + self.grace_s) * 1e9):
            self.stop()
        return all(r.proc.poll() is not None for r in self.recorders)

    def stop(self) -> None:
        """Interrupt the recorders still running with SIGINT (py-spy then writes what it has), waiting up to 10 s
        for each before it is killed."""
        for rec in self.recorders:
            if rec.proc.poll() is None:
                rec.proc.send_signal(signal.SIGINT)
        for rec in self.recorders:
            try:
                rec.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                rec.proc.kill()
                rec.proc.wait()

    def written(self, say_exit: bool = False) -> Iterator[Recording]:
        """The recordings that were written; why another has no samples goes into `errors` (from py-spy's stderr,
        or with `say_exit` its exit status when stderr says nothing)."""
        for rec in self.recorders:
            err = rec.proc.stderr.read().decode(errors="replace") if rec.proc.stderr else ""
            if rec.proc.stderr:
                rec.proc.stderr.close()
            if rec.out.is_file() and rec.out.stat().st_size > 0:
                yield rec
            elif err.strip() or say_exit:
                err = err if err.strip() else f"exit status {rec.proc.returncode}"
                if "permission" in err.lower() or "operation not permitted" in err.lower():
                    self.errors.append(f"no permission to sample rank {rec.rank} (pid {rec.pid}): {PERMISSION_HINT}")
                else:
                    self.errors.append(f"no samples of rank {rec.rank} (pid {rec.pid}): "
                                       f"{err.strip().splitlines()[-1][:200]}")

    def read(self) -> list[StackBurst]:
        """Every rank's burst that was written; what failed is in `errors`."""
        bursts = []
        for rec in self.written():
            try:
                bursts.append(read_burst(rec.out, rec.rank, self.rate_hz, self.started_ns))
            except InputError as exc:
                self.errors.append(f"rank {rec.rank}'s burst not read: {exc.message}")
        return bursts


@dataclass(slots=True, eq=False)
class ProfileSampler:
    name = "profile"
    interval_s = 1.0
    seconds: float = 10.0
    rate_hz: int = 20
    delay_s: float = 2.0
    out_dir: Path | None = None  # default RUN/profiles; the watcher's incidents record into their own folder
    judge: bool = True  # ask ctx.diagnosis for the straggler suspicion when the recordings end
    state: str = field(default="waiting", init=False)
    _pyspy: str | None = field(default=None, init=False)
    _started: float = field(default=0.0, init=False)
    _round: BurstRound | None = field(default=None, init=False)
    done: bool = field(default=False, init=False)

    def start(self, ctx: LiveContext) -> None:
        self._started = time.monotonic()
        self._pyspy = find_pyspy()
        if self._pyspy is None:
            self.done, self.state = True, "no py-spy"
            ctx.note("profile: py-spy is not installed (pip install py-spy); sampled stacks are not recorded")

    def sample(self, ctx: LiveContext) -> None:
        if self.done:
            return
        if self._round is None:
            if time.monotonic() - self._started >= self.delay_s:
                self._launch(ctx)
            return
        if self._round.done():
            self._finish(ctx)

    def _launch(self, ctx: LiveContext) -> None:
        assert self._pyspy is not None
        folder = self.out_dir or ctx.run_dir / "profiles"
        folder.mkdir(parents=True, exist_ok=True)
        rnd = self._round = BurstRound(self._pyspy, max(1, round(self.seconds)), self.rate_hz, folder, "raw", ".txt",
                                       None)
        rnd.start(ctx.alive())
        for err in rnd.errors:
            ctx.note(f"profile: {err}")
        rnd.errors.clear()  # noted: `_finish` notes what comes after
        self.done = not rnd.recorders
        self.state = f"recording {len(rnd.recorders)} rank(s) for {self.seconds:.0f}s at {self.rate_hz} Hz"

    def _finish(self, ctx: LiveContext) -> None:
        assert self._round is not None
        recorded = 0
        for rec in self._round.written(say_exit=True):
            recorded += 1
            meta = {"rank": rec.rank, "pid": rec.pid, "host": ctx.host, "rate_hz": self.rate_hz,
                    "duration_s": (time.time_ns() - rec.started_ns) / 1e9, "started_ns": rec.started_ns}
            atomic_write_text(rec.out.with_suffix(".json"), json.dumps(meta) + "\n")
        for err in self._round.errors:
            ctx.note(f"profile: {err}")
        self.done = True
        self.state = f"{recorded} of {len(self._round.recorders)} rank(s) recorded ({self.seconds:.0f}s at {self.rate_hz} Hz)"
        if recorded and self.judge and not ctx.progress.suspicion:
            samples, _ = load_profile_inputs([r.out for r in self._round.recorders if r.out.is_file()])
            ctx.progress.suspicion = ctx.diagnosis.straggler_suspicion(samples)

    def stop(self, ctx: LiveContext) -> None:
        if self.done or self._round is None:
            return
        self._round.stop()  # attach ends first
        self._finish(ctx)

    def status(self) -> str:
        return self.state
