"""`attach --watch` / `run --watch`: stay with a job for its whole life, cheaply, and open an incident when an
online rule fires.

Promise: `WatchSampler` (name ``watch``, once a second) reads the new lines of the run directory's step files
(`steps/rank-<r>.jsonl`, whatever source wrote them: the hook, `--job-log`, any later one; rank -1 is the job
as a whole) into a bounded per-rank series (the last SERIES_STEPS steps), and asks `ctx.diagnosis` (the
analyzers' online rules, through the `live/diagnosis.py` seam) three questions: did a rank's steps get slower
(degradation, with the step it began at; at most RANKS_PER_LOOK ranks a look, those unjudged longest first),
has the job stopped (hang; also when the StackSampler's stack check raised a hang suspicion), and, every
`host_check_s`, do the latest NVML / RDMA / net records show a host problem. The rules are armed once a series
holds 2 x `window` steps after the warm-up: with the hook's history copied at attach, at once on a job already
stepping; else after 2 x N steps (20 steps of a 0.5 s job: 10 s).

When a rule fires, an incident is captured in a thread of its own (`live/incidents.py`). Rate limits: one
capture at a time; per kind, none within `cooldown_s` of the last; a degradation incident restarts the
series (the slower level becomes the new best, so only a further change fires again); a hang fires again only
after steps resumed; at most `max_incidents` per session. Disk: `cap_bytes` per incident, `total_cap_bytes`
for `incidents/` in all; once that is reached the oldest incidents are kept and new ones record only their
incident.json (said in it). Once armed, a baseline (`incidents/baseline/`: `baseline_seconds` of every rank's
stacks side by side and the steps so far) is recorded once. `WatchState` is what the panel and `--prom` show.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.steps import parse_step_line
from perftracker.live.incidents import (
    COUNTERS_TAIL_BYTES,
    CapturePlan,
    IncidentRecord,
    IncidentReporter,
    baseline_capture,
    capture_incident,
    copy_tail,
    folder_bytes,
    incident_folder,
)
from perftracker.live.sampler import LiveContext
from perftracker.live.stacks import StackSampler, find_pyspy
from perftracker.live.steps_sampler import LineTail
from perftracker.store.alarms import Alarm, StepSeries

SERIES_STEPS = 400  # per rank: the rules look at 20 x N steps at most (N = 10 by default)
RESCAN_S = 5.0
RANKS_PER_LOOK = 4  # the degradation rule judges at most this many ranks a second (round robin): bounded CPU


@dataclass
class WatchOptions:
    window: int = 10  # N (defaults measured in analyzers/online/step_rules.py)
    rise: float = 0.20  # X
    profile_seconds: float = 10.0
    profile_rate_hz: int = 20
    baseline_seconds: float = 10.0
    trace_steps: int = 8  # enough steps (trials) for the straggler test to name one of 2 ranks at 1%
    cooldown_s: float = 600.0
    max_incidents: int = 20
    cap_bytes: int = 64 * 1024 * 1024
    total_cap_bytes: int = 512 * 1024 * 1024
    host_check_s: float = 60.0
    reporter: IncidentReporter | None = None
    publish: Callable[[WatchState], None] | None = None  # --prom


@dataclass
class WatchState:
    """What the watcher knows, for the panel and the metrics."""

    armed: bool = False
    armed_at_s: float = 0.0
    baseline: str = "not yet"  # not yet | recording | ready
    current_s: dict[int, float] = field(default_factory=dict)  # rank -> mean of the last N steps
    best_s: dict[int, float] = field(default_factory=dict)  # rank -> best mean of N steps
    last_step: dict[int, int] = field(default_factory=dict)
    incidents: list[tuple[float, str, str]] = field(default_factory=list)  # (epoch s, kind, folder name)
    suppressed: int = 0


@dataclass
class WatchSampler:
    options: WatchOptions = field(default_factory=WatchOptions)
    name: str = "watch"
    interval_s: float = 1.0
    state: WatchState = field(default_factory=WatchState)
    _tails: dict[Path, LineTail] = field(default_factory=dict)
    _series: dict[int, deque[tuple[int, int]]] = field(default_factory=dict)  # rank -> (step, dur_ns)
    _last_ns: dict[int, int] = field(default_factory=dict)
    _known: int = 0
    _next_scan: float = 0.0
    _next_host: float = 0.0
    _counter_sizes: tuple[int, ...] = ()
    _cached: list[StepSeries] = field(default_factory=list)
    _fresh: set[int] = field(default_factory=set)  # ranks with steps the degradation rule has not judged yet
    _judged: dict[int, int] = field(default_factory=dict)  # rank -> when (in steps read) it was last judged
    _last_by_kind: dict[str, float] = field(default_factory=dict)
    _hang_open: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _capture: threading.Thread | None = None
    _baseline: threading.Thread | None = None
    stacks: StackSampler | None = None  # the session's: its lock keeps two native dumps off one rank at once
    _started_s: float = 0.0

    def start(self, ctx: LiveContext) -> None:
        self._started_s = time.time()
        self._next_host = time.monotonic() + self.options.host_check_s
        if self.stacks is None and find_pyspy() is not None:
            self.stacks = StackSampler()
            self.stacks.pyspy = find_pyspy()
        elif self.stacks is None:
            ctx.note("watch: py-spy is not installed: incidents have no stacks (pip install py-spy)")

    # -- steps ----------------------------------------------------------------------------------
    def _read_steps(self, ctx: LiveContext) -> bool:
        if time.monotonic() >= self._next_scan:
            self._next_scan = time.monotonic() + RESCAN_S
            for path in sorted((ctx.run_dir / "steps").glob("rank-*.jsonl")):
                self._tails.setdefault(path, LineTail(path))
        new = False
        for tail in self._tails.values():
            for line in tail.read_lines():
                rec = parse_step_line(line)
                if rec is None:
                    continue
                rank, step = int(rec["rank"]), int(rec["step"])
                series = self._series.setdefault(rank, deque(maxlen=SERIES_STEPS))
                series.append((step, int(rec["end_ns"]) - int(rec["start_ns"])))
                if step >= self.state.last_step.get(rank, -1):
                    self.state.last_step[rank], self._last_ns[rank] = step, int(rec["end_ns"])
                self._known += 1
                self._fresh.add(rank)
                new = True
        if new:
            self._cached = []
        return new

    def series(self) -> list[StepSeries]:
        if not self._cached:
            for rank, items in sorted(self._series.items()):
                ordered = np.array(sorted(items), dtype=np.int64).reshape(-1, 2)
                self._cached.append(StepSeries(rank, ordered[:, 0], ordered[:, 1]))
        return self._cached

    def _update_levels(self, series: list[StepSeries]) -> None:
        n = self.options.window
        for s in series:
            durs = s.durations_ns[s.steps >= 2].astype(float) / 1e9
            if len(durs) >= n:
                means = np.convolve(durs, np.ones(n) / n, mode="valid")
                self.state.current_s[s.rank] = float(means[-1])
                if len(durs) >= 2 * n:
                    self.state.best_s[s.rank] = float(means[:-n].min())

    # -- the loop -------------------------------------------------------------------------------
    def sample(self, ctx: LiveContext) -> None:
        new = self._read_steps(ctx)
        series = self.series()
        if new:
            self._hang_open = False  # steps came: a later stall is a new hang
            self._update_levels(series)
        n = self.options.window
        if not self.state.armed and any(int((s.steps >= 2).sum()) >= 2 * n for s in series):
            self.state.armed, self.state.armed_at_s = True, time.time()
            self._start_baseline(ctx)
        alarms: list[Alarm] = []
        diagnosis = ctx.diagnosis
        if self._fresh and self.state.armed:
            turn = sorted(self._fresh, key=lambda r: self._judged.get(r, 0))[:RANKS_PER_LOOK]  # longest unjudged first
            self._fresh.difference_update(turn)
            self._judged.update((r, self._known) for r in turn)
            found = diagnosis.degradation_alarm([s for s in series if s.rank in turn], n, self.options.rise)
            if found is not None:
                alarms.append(found)
        if not self._hang_open:
            recent = [s.durations_ns[-200:] for s in series]
            med = int(np.median(np.concatenate(recent))) if recent else None
            hang = diagnosis.hang_alarm(self.state.last_step, self._last_ns, med, self._known, time.time_ns())
            with ctx.lock:
                suspicion = ctx.progress.suspicion
            if hang is None and suspicion.startswith("hang?"):
                hang = Alarm("hang", suspicion, step=max(self.state.last_step.values(), default=-1))
            if hang is not None:
                alarms.append(hang)
        if time.monotonic() >= self._next_host:
            self._next_host = time.monotonic() + self.options.host_check_s
            host = self._host_check(ctx)
            if host is not None:
                alarms.append(host)
        for alarm in alarms:
            self._open(ctx, alarm)
        if self.options.publish is not None:
            self.options.publish(self.state)

    def _host_check(self, ctx: LiveContext) -> Alarm | None:
        files = sorted((ctx.run_dir / "counters").glob("*.jsonl"))
        sizes = tuple(f.stat().st_size for f in files if f.is_file())
        if not files or sizes == self._counter_sizes:
            return None
        self._counter_sizes = sizes
        tmp = Path(tempfile.mkdtemp(prefix="perftracker-watch-"))
        try:
            for f in files:
                copy_tail(f, tmp / "counters" / f.name, COUNTERS_TAIL_BYTES // 4)
            store = load_path(tmp, LoadOptions(cache_dir=None, workers=1))
            return ctx.diagnosis.host_alarm(store)
        except Exception as exc:  # noqa: BLE001  a partial record must not stop the watch
            ctx.note(f"watch: host counters not judged ({type(exc).__name__}: {exc})")
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- incidents ------------------------------------------------------------------------------
    def _open(self, ctx: LiveContext, alarm: Alarm) -> None:
        now = time.time()
        busy = self._capture is not None and self._capture.is_alive()
        cooling = now - self._last_by_kind.get(alarm.kind, -1e18) < self.options.cooldown_s
        if busy or cooling or len(self.state.incidents) >= self.options.max_incidents:
            self.state.suppressed += 1
            return
        self._last_by_kind[alarm.kind] = now
        if alarm.kind == "hang":
            self._hang_open = True
        if alarm.kind == "degradation":  # the slower level becomes the new normal: only a further change fires
            self._series.clear()
            self._cached, self._fresh = [], set()
            self.state.best_s.clear()
        folder = incident_folder(ctx.run_dir, alarm, now)
        self.state.incidents.append((now, alarm.kind, folder.name))
        ctx.note(f"watch: incident {folder.name}: {alarm.text[:300]}")
        incidents = ctx.run_dir / "incidents"
        if incidents.is_dir() and folder_bytes(incidents) >= self.options.total_cap_bytes:
            record = IncidentRecord.of(alarm, time.time_ns())
            record.state = "not captured"
            record.notes.append(f"incidents/ holds {self.options.total_cap_bytes // (1024 * 1024)} MB already (its "
                                "cap): the oldest incidents are kept, this one records only its trigger")
            folder.mkdir(parents=True, exist_ok=True)
            record.write(folder)
            return
        plan = CapturePlan(self.options.profile_seconds, self.options.profile_rate_hz, self.options.trace_steps,
                           self.options.cap_bytes)
        self._capture = threading.Thread(
            target=capture_incident, args=(ctx, alarm, folder, plan, self.stacks, self.options.reporter, self._stop),
            name="perftracker-incident", daemon=True)
        self._capture.start()

    def _start_baseline(self, ctx: LiveContext) -> None:
        self.state.baseline = "recording"

        def run() -> None:
            baseline_capture(ctx, ctx.run_dir / "incidents" / "baseline", self.options.baseline_seconds,
                             self.options.profile_rate_hz, self._stop)
            self.state.baseline = "ready"

        self._baseline = threading.Thread(target=run, name="perftracker-baseline", daemon=True)
        self._baseline.start()

    def stop(self, ctx: LiveContext) -> None:
        """Ends the recordings (they write what they have); the capture in progress is kept and analyzed."""
        self._stop.set()
        for thread in (self._baseline, self._capture):
            if thread is not None:
                thread.join(timeout=120)
        if self.options.publish is not None:
            self.options.publish(self.state)

    def status(self) -> str:
        st = self.state
        if not st.armed:
            most = max((int((s.steps >= 2).sum()) for s in self.series()), default=0)
            text = f"arming: {most}/{2 * self.options.window} steps"
        else:
            text = f"armed {time.time() - st.armed_at_s:.0f}s ago, baseline {st.baseline}"
            worst = max(st.current_s, key=lambda r: st.current_s[r] / st.best_s.get(r, st.current_s[r]), default=None)
            if worst is not None:
                best = st.best_s.get(worst)
                text += (f"; rank {worst} now {st.current_s[worst] * 1e3:.1f} ms" +
                         (f" vs best {best * 1e3:.1f} ms" if best else ""))
        if st.incidents:
            last = st.incidents[-3:]
            text += f"; {len(st.incidents)} incident(s): " + ", ".join(
                f"{kind} {time.strftime('%H:%M:%S', time.gmtime(at))}" for at, kind, _ in last)
        else:
            text += "; no incident"
        return text
