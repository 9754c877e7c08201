"""`attach --watch` / `run --watch`: stay with a job for its whole life, cheaply, and open an incident when an
online rule fires.

`WatchSampler` takes new step records into per-rank series once a second and asks `ctx.diagnosis` about
degradation, a hang and this host's counters; once armed it records a baseline; a rule that fires opens an
incident (`incidents.py`), rate- and disk-limited. `WatchState` is what the panel and `--prom` show.
"""

from __future__ import annotations

import glob
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.steps import parse_step_lines
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import LineTail
from perftracker.live.samplers.stack_steps import STACKS_SOURCE
from perftracker.live.samplers.stacks import StackSampler, find_pyspy
from perftracker.live.samplers.step_state import StepFeed, StepState
from perftracker.live.watch.incidents import (
    COUNTERS_TAIL_BYTES,
    CapturePlan,
    IncidentRecord,
    IncidentReporter,
    baseline_capture,
    baseline_folder,
    capture_incident,
    copy_tail,
    folder_bytes,
    incident_folder,
)
from perftracker.live.watch.series import BurstSeries, RankSeriesBook, levels
from perftracker.store.alarms import Alarm, StepSeries

RESCAN_S = 5.0  # new step files, and the counters' new bytes for urgent signals, are looked for this often
# Host signals judged at once: a link state record (only the net sampler's link watcher writes this key,
# netdev.state_record), an XID (a GPU sample's non-empty "xid" list, nvml_sampler)
URGENT = re.compile(rb'"changed_within_s"|"xid":\s*\[\s*\d')
PUBLISH_S = 10.0  # --prom is rewritten when steps or incidents came, else this often


def own_counters(ctx: LiveContext, kind: str = "*") -> list[Path]:
    """This host's counter files (`counters/<host>.<kind>.jsonl`; kind net, gpu, rdma or * for all): in a run directory the watchers of several nodes
    share, each judges its own host's signals (another node's flap is that node's watcher's incident)."""
    return list((ctx.run_dir / "counters").glob(f"{glob.escape(ctx.host)}.{kind}.jsonl"))


class HostCheck:
    """When the watcher judges the host's counters (periodically, or at once on an urgent signal), and how."""

    __slots__ = ("every_s", "next_check", "next_urgent_look", "_tails", "_sizes")

    def __init__(self, every_s: float = 600.0) -> None:
        self.every_s = every_s
        self.next_check = time.monotonic() + every_s  # monotonic time of the next periodic check
        self.next_urgent_look = 0.0  # monotonic time the counters' new bytes are looked at next
        self._tails: dict[Path, LineTail] = {}
        self._sizes: tuple[int, ...] = ()

    def look(self, ctx: LiveContext) -> Alarm | None:
        """The host alarm when a check is due and finds one, else None."""
        if time.monotonic() < self.next_check and not self._urgent(ctx):
            return None
        self.next_check = time.monotonic() + self.every_s
        return self._judge(ctx)

    def _urgent(self, ctx: LiveContext) -> bool:
        if time.monotonic() < self.next_urgent_look:
            return False
        self.next_urgent_look = time.monotonic() + RESCAN_S
        for path in [*own_counters(ctx, "net"), *own_counters(ctx, "gpu")]:
            if path not in self._tails:  # from its end: what was there is judged by the periodic check
                self._tails[path] = LineTail(path, path.stat().st_size)
        return any(URGENT.search(line) for tail in self._tails.values() for line in tail.read_lines())

    def _judge(self, ctx: LiveContext) -> Alarm | None:
        files = sorted(own_counters(ctx))
        sizes = tuple(f.stat().st_size for f in files if f.is_file())
        if not files or sizes == self._sizes:
            return None
        self._sizes = sizes
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

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()


@dataclass
class WatchOptions(CapturePlan):
    window: int = 10  # N (defaults measured in analyzers/online/step_rules.py)
    burst_window: int = 3  # N for the burst periods of sampled stacks (analyzers/online/burst_rule.py)
    rise: float = 0.20  # X
    baseline_seconds: float = 10.0
    cooldown_s: float = 600.0
    max_incidents: int = 20
    total_cap_bytes: int = 512 * 1024 * 1024
    host_check_s: float = 600.0  # and at once on a link state change or an XID
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


@dataclass(slots=True, eq=False)
class WatchSampler:
    name = "watch"
    interval_s = 1.0
    options: WatchOptions = field(default_factory=WatchOptions)
    feed: StepFeed | None = None  # the steps sampler's records, parsed once there; None: the step files are read here
    stacks: StackSampler | None = None  # the session's: its lock keeps two native dumps off one rank at once
    state: WatchState = field(default_factory=WatchState, init=False)
    book: RankSeriesBook = field(default_factory=RankSeriesBook, init=False)  # ranks' last steps, whose turn it is
    bursts: BurstSeries = field(default_factory=BurstSeries, init=False)  # `source: "stacks"` records (stack_steps.py)
    hosts: HostCheck = field(default_factory=HostCheck, init=False)  # when and how the host's counters are judged
    # the job's step progress: its own until `_step_state` takes the steps sampler's (and ctx.lock with it)
    _steps: StepState = field(default_factory=StepState, init=False)
    _steps_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _tails: dict[Path, LineTail] = field(default_factory=dict, init=False)
    _next_publish: float = field(default=0.0, init=False)
    _next_scan: float = field(default=0.0, init=False)
    _last_by_kind: dict[str, float] = field(default_factory=dict, init=False)
    _hang_open: bool = field(default=False, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _capture: threading.Thread | None = field(default=None, init=False)
    _baseline: threading.Thread | None = field(default=None, init=False)

    def start(self, ctx: LiveContext) -> None:
        self.bursts.window = self.options.burst_window
        self.hosts = HostCheck(self.options.host_check_s)
        pyspy = find_pyspy()
        if self.stacks is None and pyspy is not None:
            self.stacks = StackSampler(pyspy=pyspy)
        elif self.stacks is None:
            ctx.note("watch: py-spy is not installed: incidents have no stacks (pip install py-spy)")

    # -- steps ----------------------------------------------------------------------------------
    def _new_records(self, ctx: LiveContext) -> list[dict[str, Any]]:
        """The step records that came since the last look: from the steps sampler's feed (parsed once, there),
        else read here from the new bytes of the run directory's step files."""
        if self.feed is not None:
            return self.feed.take()
        if time.monotonic() >= self._next_scan:
            self._next_scan = time.monotonic() + RESCAN_S
            for path in sorted((ctx.run_dir / "steps").glob("rank-*.jsonl")):
                self._tails.setdefault(path, LineTail(path))
        return [rec for tail in self._tails.values() for rec in parse_step_lines(tail.read_lines())]

    def _step_state(self, ctx: LiveContext) -> StepState:
        """The one step state of the session (`ctx.progress.steps`, kept by the steps sampler that feeds this
        watcher) when fed, else this watcher's own (it reads the step files itself)."""
        if self.feed is not None and self._steps is not ctx.progress.steps:
            self._steps, self._steps_lock = ctx.progress.steps, ctx.lock
        return self._steps

    @property
    def _known(self) -> int:
        """Step records known (of the session's step state)."""
        with self._steps_lock:
            return self._steps.known

    def _read_steps(self, ctx: LiveContext) -> bool:
        records = self._new_records(ctx)
        steps = self._step_state(ctx)
        own = steps is not ctx.progress.steps
        for rec in records:
            if rec.get("source") == STACKS_SOURCE:  # a burst's period: its own coarse series, never the stall rule's
                self.bursts.add(rec)
                continue
            rank, step, end_ns = int(rec["rank"]), int(rec["step"]), int(rec["end_ns"])
            duration = end_ns - int(rec["start_ns"])
            self.book.add(rank, step, duration)
            if own:
                steps.add(rank, step, end_ns - duration, end_ns)
        if records:
            with self._steps_lock:
                self.state.last_step = dict(steps.last_step)
        return bool(records)

    def series(self) -> list[StepSeries]:
        return [self.book.series_of(rank) for rank in self.book.ranks()]

    def _median(self) -> int | None:
        """The job's typical step (`StepState.median_step_ns`, the one definition the stack sampler uses too)."""
        with self._steps_lock:
            return self._steps.median_step_ns()

    # -- the loop -------------------------------------------------------------------------------
    def sample(self, ctx: LiveContext) -> None:
        new = self._read_steps(ctx)
        if new:
            self._hang_open = False  # steps came: a later stall is a new hang
        n = self.options.window
        if not self.state.armed and (any(self.book.counted(r) >= 2 * n for r in self.book.fresh) or self.bursts.ready()):
            self.state.armed, self.state.armed_at_s = True, time.time()
            self._start_baseline(ctx)
        alarms: list[Alarm] = []
        diagnosis = ctx.diagnosis
        if self.book.fresh:  # the ranks with new steps, at most RANKS_PER_LOOK a look, longest unjudged first
            looked = self.book.turn(self._known)
            for s in looked:
                levels(s.rank, s.durations_ns[s.steps >= 2].astype(float) / 1e9, n, self.state.current_s, self.state.best_s)
            found = diagnosis.degradation_alarm(looked, n, self.options.rise) if self.state.armed else None
            if found is not None:
                alarms.append(found)
        burst = self.bursts.judge(diagnosis, self.options.rise, self.state.armed, self.state.current_s, self.state.best_s)
        if burst is not None:
            alarms.append(burst)
        if not self._hang_open:
            with self._steps_lock:
                last_ns = dict(self._steps.last_step_ns)
            hang = diagnosis.hang_alarm(self.state.last_step, last_ns, self._median(), self._known, time.time_ns())
            with ctx.lock:
                suspicion = ctx.progress.suspicion
            if hang is None and suspicion.startswith("hang?"):
                hang = Alarm("hang", suspicion, step=max(self.state.last_step.values(), default=-1))
            if hang is not None:
                alarms.append(hang)
        host = self.hosts.look(ctx)
        if host is not None:
            alarms.append(host)
        for alarm in alarms:
            self._open(ctx, alarm)
        if self.options.publish is not None and (new or alarms or time.monotonic() >= self._next_publish):
            self._next_publish = time.monotonic() + PUBLISH_S
            self.options.publish(self.state)

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
            self.bursts.clear()
            self.book.clear()
            with self._steps_lock:
                self._steps.restart()  # the typical step is built again from the slower steps
            self.state.best_s.clear()
        folder = incident_folder(ctx.run_dir, alarm, now, ctx.host)
        self.state.incidents.append((now, alarm.kind, folder.name))
        ctx.note(f"watch: incident {folder.name}: {alarm.text[:300]}")
        incidents = ctx.run_dir / "incidents"
        if incidents.is_dir() and folder_bytes(incidents) >= self.options.total_cap_bytes:
            record = IncidentRecord.of(alarm, time.time_ns(), ctx.host)
            record.state = "not captured"
            record.notes.append(f"incidents/ holds {self.options.total_cap_bytes // (1024 * 1024)} MB already (its "
                                "cap): the oldest incidents are kept, this one records only its trigger")
            folder.mkdir(parents=True, exist_ok=True)
            record.write(folder)
            return
        self._capture = threading.Thread(
            target=capture_incident, args=(ctx, alarm, folder, self.options, self.stacks, self.options.reporter, self._stop),
            name="perftracker-incident", daemon=True)
        self._capture.start()

    def _start_baseline(self, ctx: LiveContext) -> None:
        self.state.baseline = "recording"

        def run() -> None:
            baseline_capture(ctx, baseline_folder(ctx.run_dir, ctx.host), self.options.baseline_seconds,
                             self.options.profile_rate_hz, self._stop)
            self.state.baseline = "ready"

        self._baseline = threading.Thread(target=run, name="perftracker-baseline", daemon=True)
        self._baseline.start()

    def stop(self, ctx: LiveContext) -> None:
        """Ends the recordings (they write what they have); the capture in progress is kept and analyzed."""
        self._stop.set()
        for tail in self._tails.values():
            tail.close()
        self.hosts.close()
        for thread in (self._baseline, self._capture):
            if thread is not None:
                thread.join(timeout=120)
        if self.options.publish is not None:
            self.options.publish(self.state)

    def status(self) -> str:
        st = self.state
        if not st.armed:
            most = max((self.book.counted(rank) for rank in self.book.ranks()), default=0)
            text = f"arming: {most}/{2 * self.options.window} steps"
            if self.bursts.most():
                text += f", {self.bursts.most()}/{2 * self.bursts.window} stack bursts"
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
