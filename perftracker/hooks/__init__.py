"""Opt-in, in-process step timing and on-demand profiler windows for a training job.

`import perftracker.hooks; perftracker.hooks.install()` records every rank's step boundaries and serves
`perftracker attach --trace-steps N`, at negligible cost, and never raises into the job. How it works and the
spool it writes: docs/internals/core.md.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perftracker.launcher_env import rank_in
from perftracker.rundir import atomic_write_bytes, host_name

POLL_S = 1.0
MAX_TRACE_STEPS = 1000

_LOCK = threading.Lock()
_HOOK: _Hook | None = None


def spool_dir(environ: Mapping[str, str], parent_pid: int) -> Path:
    """The directory the hook of a process with `environ` and parent `parent_pid` writes into."""
    explicit = environ.get("PERFTRACKER_RUN_DIR", "").strip()
    if explicit:
        return Path(explicit)
    base = Path(environ.get("TMPDIR") or "/tmp") / "perftracker"
    run_id = environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id and run_id != "none":
        return base / run_id.replace("/", "_").replace("\0", "_")
    return base / f"pid-{parent_pid}"


def install(run_dir: str | Path | None = None) -> None:
    """Start recording step times and serving trace requests in this process (idempotent, never raises)."""
    global _HOOK
    try:
        with _LOCK:
            if _HOOK is not None:
                return
            root = Path(run_dir) if run_dir is not None else spool_dir(os.environ, os.getppid())
            hook = _Hook(root, rank_in(os.environ) or 0, host_name())  # the job's entry point: named once
            hook.register()
            _HOOK = hook
    except Exception as exc:  # noqa: BLE001 - never raise into the training job
        _warn(f"not installed ({type(exc).__name__}: {exc})")


def installed_dir() -> Path | None:
    """The spool directory of the installed hook, or None."""
    return _HOOK.root if _HOOK is not None else None


def _warn(text: str) -> None:
    with contextlib.suppress(Exception):  # never raise into the training job
        print(f"perftracker.hooks: {text}", file=sys.stderr, flush=True)


class _Hook:
    def __init__(self, root: Path, rank: int, host: str) -> None:
        self.root = root
        self.rank = rank
        self.host = host
        self.installed_ns = time.time_ns()
        for sub in ("ranks", "steps", "requests", "traces"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        # Kept open for the life of the process; one step is one small buffered write + flush.
        self.steps = open(root / "steps" / f"rank-{rank}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        info = {"rank": rank, "pid": os.getpid(), "host": self.host, "installed_ns": self.installed_ns}
        atomic_write_bytes(root / "ranks" / f"rank-{rank}.json", json.dumps(info).encode())
        self.handles: list[Any] = []
        self.primary: int | None = None
        self.step = 0
        self.last_end_ns: int | None = None
        self.opt_start: int | None = None
        self.next_poll = 0.0
        self.seen: set[str] = set()
        self.prof: Any = None
        self.prof_id = ""
        self.prof_left = 0
        self.broken = False

    def register(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.handles = [register_optimizer_step_pre_hook(self._pre),
                        register_optimizer_step_post_hook(self._post)]

    def _pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not self.broken and (self.primary is None or id(opt) == self.primary):
            self.opt_start = time.perf_counter_ns()

    def _post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.broken:
            return
        try:
            self._on_step(opt)
        except Exception as exc:  # noqa: BLE001 - never raise into the training job
            self._disable(f"turned off after an error ({type(exc).__name__}: {exc}); training goes on")

    def _on_step(self, opt: Any) -> None:
        if self.primary is None:
            self.primary = id(opt)
        elif id(opt) != self.primary:
            return
        end_ns = time.time_ns()
        if self.last_end_ns is not None:
            record: dict[str, Any] = {"rank": self.rank, "step": self.step, "start_ns": self.last_end_ns,
                                      "end_ns": end_ns, "host": self.host}
            if self.opt_start is not None:
                record["phases_ns"] = {"optimizer": time.perf_counter_ns() - self.opt_start}
            self.steps.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.steps.flush()
        self.last_end_ns = end_ns
        self.opt_start = None
        self.step += 1
        if self.prof is not None:
            self._profiler_step()
        now = time.monotonic()
        if now >= self.next_poll:
            self.next_poll = now + POLL_S
            self._poll()

    # ------------------------------------------------------------------ on-demand traces
    def _poll(self) -> None:
        if self.prof is not None:
            return
        with os.scandir(self.root / "requests") as entries:
            names = sorted(e.name for e in entries if e.name.startswith("trace-") and e.name.endswith(".json"))
        for name in names:
            if name in self.seen:
                continue
            self.seen.add(name)
            req_id = name[len("trace-"):-len(".json")]
            path = self.root / "requests" / name
            if path.stat().st_mtime_ns < self.installed_ns or self._done_marker(req_id).exists():
                continue
            try:
                request = json.loads(path.read_text(encoding="utf-8"))
                steps = max(1, min(MAX_TRACE_STEPS, int(request.get("steps", 1))))
                ranks = request.get("ranks")
            except (OSError, ValueError, TypeError, AttributeError):
                continue
            if isinstance(ranks, list) and self.rank not in ranks:
                continue
            try:
                self._start_profiler(req_id, steps)
            except Exception as exc:  # noqa: BLE001 - e.g. the job runs its own profiler: keep timing steps
                self.prof = None
                error = f"{type(exc).__name__}: {exc}"
                _warn(f"trace request {req_id} skipped ({error})")
                self._mark_done(req_id, "error", error)
            return

    def _done_marker(self, req_id: str) -> Path:
        return self.root / "requests" / f"trace-{req_id}.rank-{self.rank}.done"

    def _mark_done(self, req_id: str, key: str, value: str) -> None:
        marker = {"rank": self.rank, "pid": os.getpid(), key: value, "ended_ns": time.time_ns()}
        atomic_write_bytes(self._done_marker(req_id), json.dumps(marker).encode())

    def _start_profiler(self, req_id: str, steps: int) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        if torch.autograd._profiler_enabled():  # type: ignore[attr-defined]
            raise RuntimeError("the job's own profiler is running; not starting a second one")
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.prof_id, self.prof_left = req_id, steps + 1  # one warm-up step, then `steps` recorded
        self.prof = profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                            on_trace_ready=self._trace_ready, record_shapes=True)
        self.prof.start()

    def _profiler_step(self) -> None:
        prof = self.prof
        prof.step()
        self.prof_left -= 1
        if self.prof_left <= 0:
            self.prof = None
            prof.stop()

    def _trace_ready(self, prof: Any) -> None:
        traces = self.root / "traces"
        dest = traces / f"rank-{self.rank}.{self.prof_id}.pt.trace.json.gz"
        raw = traces / f".rank-{self.rank}.{self.prof_id}.pt.trace.json"
        packed = traces / f".rank-{self.rank}.{self.prof_id}.tmp.gz"
        try:
            prof.export_chrome_trace(str(raw))
            with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
                shutil.copyfileobj(src, dst)
            os.replace(packed, dest)
        finally:
            raw.unlink(missing_ok=True)
            packed.unlink(missing_ok=True)
        self._mark_done(self.prof_id, "file", dest.name)

    def _disable(self, text: str) -> None:
        self.broken = True
        _warn(text)
        stops = [handle.remove for handle in self.handles] + ([self.prof.stop] if self.prof is not None else [])
        for stop in stops:
            with contextlib.suppress(Exception):  # never raise into the training job
                stop()
        self.prof = None
