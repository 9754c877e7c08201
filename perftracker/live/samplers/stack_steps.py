"""The step signal of an unprepared job under `--watch`: the iteration period read from short sampled-stack
bursts, for jobs with no hook, no recognised step lines and no NCCL Inspector output.

`StackStepsSampler` records, while no other step source has produced a record, a short py-spy burst of a few
ranks every `every_s`; a rank whose burst shows a period (`ctx.diagnosis.step_period`) gets one step-like
record (`"source": "stacks"`) in `steps/rank-<r>.jsonl` and in the `StepFeed`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.profile_sampler import BurstRound
from perftracker.live.samplers.stacks import find_pyspy
from perftracker.live.samplers.step_state import StepFeed
from perftracker.rundir import append_jsonl, step_file
from perftracker.store.stack_frames import StackBurst

STACKS_SOURCE = "stacks"  # the `source` of a step record made from a burst
SAMPLES_PER_BURST = 250


def burst_record(burst: StackBurst, index: int, end_ns: int, host: str, period_s: float, confidence: float,
                 cycles: float) -> dict[str, Any]:
    """The step-like record of one rank's burst (see the module docstring)."""
    period_ns = max(1, round(period_s * 1e9))
    return {"rank": burst.rank, "step": index, "start_ns": end_ns - period_ns, "end_ns": end_ns, "host": host,
            "source": STACKS_SOURCE, "period_s": round(period_s, 6), "confidence": round(confidence, 3),
            "cycles": round(cycles, 1), "burst_s": round(burst.seconds, 2), "rate_hz": burst.rate_hz}


@dataclass(slots=True, eq=False)
class StackStepsSampler:
    name = "stack-steps"
    interval_s = 1.0
    quick_bursts = 6  # the first bursts come quicker: 2 x N of them arm the rules (N = 3)
    every_s: float = 60.0
    burst_s: int = 5
    rate_hz: int = 50
    grace_s: float = 30.0
    quick_every_s: float = 15.0
    # The ranks each burst records: the lowest this many (0: every rank). One is enough for the step signal, since
    # the ranks of a synchronous job step together (a slowed rank slows every rank's iterations); the incident's
    # capture then records every rank side by side, and its analysis names the rank.
    ranks_per_burst: int = 1
    feed: StepFeed | None = None
    bursts: int = field(default=0, init=False)
    periods: int = field(default=0, init=False)  # rank-bursts that showed a period
    no_period: int = field(default=0, init=False)
    state: str = field(default="waiting", init=False)
    _pyspy: str | None = field(default=None, init=False)
    _started: float = field(default=0.0, init=False)
    _next: float = field(default=0.0, init=False)
    _round: BurstRound | None = field(default=None, init=False)
    _folder: Path | None = field(default=None, init=False)
    _other_source: bool = field(default=False, init=False)

    @classmethod
    def every(cls, every_s: float, feed: StepFeed | None) -> StackStepsSampler:
        """The sampler of `--stack-steps-every every_s`: bursts of 5 s (at most every_s - 1) of about 250 samples
        (50 Hz for 5 s, at most 100 Hz for shorter ones), the grace period and the first bursts' spacing no longer
        than every_s (a short every_s is for tests and quick looks)."""
        burst_s = max(1, min(5, int(every_s) - 1))
        return cls(every_s=every_s, burst_s=burst_s, rate_hz=min(100, max(50, round(SAMPLES_PER_BURST / burst_s))),
                   grace_s=min(30.0, every_s), quick_every_s=min(15.0, every_s), feed=feed)

    def start(self, ctx: LiveContext) -> None:
        self._started = time.monotonic()
        self._next = self._started + self.grace_s
        self._pyspy = find_pyspy()
        if self._pyspy is None:
            self.state = "no py-spy"

    def _other_step_source(self, ctx: LiveContext) -> bool:
        with ctx.lock:
            stepping = bool(ctx.progress.steps.last_step)
        inspector = ctx.run_dir / "inspector"
        return stepping or (inspector.is_dir() and any(inspector.iterdir()))

    def sample(self, ctx: LiveContext) -> None:
        if self._pyspy is None:
            return
        if self._round is not None:
            if self._round.done():
                self._finish(ctx)
            return
        if time.monotonic() < self._next:
            return
        if self._other_step_source(ctx):  # the hook, step lines or Inspector give the steps: no burst needed
            if not self._other_source:
                self.state = "not needed: the job has another step source"
            self._other_source = True
            self._next = time.monotonic() + self.every_s
            return
        workers = sorted(ctx.alive(), key=lambda w: w.rank)
        if self.ranks_per_burst > 0:
            workers = workers[:self.ranks_per_burst]
        if not workers:
            return
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="perftracker-stack-steps-"))
        self._round = BurstRound(self._pyspy, self.burst_s, self.rate_hz, self._folder)
        self._round.start(workers)
        self.state = f"recording burst {self.bursts} of {len(workers)} rank(s) ({self.burst_s}s at {self.rate_hz} Hz)"

    def _finish(self, ctx: LiveContext) -> None:
        assert self._round is not None
        rnd, self._round = self._round, None
        bursts = rnd.read()
        for err in rnd.errors:
            ctx.note(f"stack-steps: {err}")
        end_ns = rnd.started_ns + int(rnd.seconds * 1e9)
        records = []
        for burst in bursts:
            found = ctx.diagnosis.step_period(burst)
            if found is None:
                self.no_period += 1
                continue
            self.periods += 1
            record = burst_record(burst, self.bursts, end_ns, ctx.host, found.period_s, found.confidence, found.cycles)
            append_jsonl(step_file(ctx.run_dir, burst.rank), record)
            records.append(record)
        if self.feed is not None and records:
            self.feed.publish(records)
        self.bursts += 1
        for path in rnd.folder.glob("rank-*.chrometrace.json"):
            path.unlink(missing_ok=True)
        every = self.quick_every_s if self.bursts < self.quick_bursts else self.every_s
        self._next = time.monotonic() + max(0.0, every - self.burst_s)
        shown = ", ".join(f"rank {r['rank']} {r['period_s'] * 1e3:.0f} ms" for r in records[:4])
        self.state = (f"{self.bursts} burst(s); last: {shown or 'no period'}; next in {every:.0f}s")

    def stop(self, ctx: LiveContext) -> None:
        if self._round is not None:
            self._round.stop()
            self._round.read()
            self._round = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        if self.periods:
            ctx.note(f"stack-steps: the job offered no other step signal; its iteration period came from sampled "
                     f"stacks: {self.periods} rank-burst(s) with a period in {self.bursts} burst(s) "
                     "(steps/rank-<r>.jsonl, \"source\": \"stacks\")")
        elif self.bursts:
            ctx.note(f"stack-steps: {self.bursts} burst(s) of sampled stacks showed no iteration period (idle, "
                     "hung, or steps longer than a third of a burst): no step signal from stacks")

    def status(self) -> str:
        text = self.state
        if self.no_period:
            text += f"; {self.no_period} rank-burst(s) without a period"
        return text
