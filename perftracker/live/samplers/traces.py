"""On-demand kernel/operator traces of every rank of an attached job (`attach --trace-steps N`).

`TraceSampler` asks every rank once for N steps, through the hook's spool (a request file) or, for ranks
started with KINETO_USE_DAEMON=1, as a stand-in for dynolog on libkineto's socket; what arrives goes into
`traces/rank-<r>.pt.trace.json[.gz]`. Ranks with neither get one note; stop waits a bounded time.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from perftracker.hooks import spool_dir
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.steps_sampler import hooked_by
from perftracker.rundir import atomic_write_text

METADATA = struct.Struct("<Q32s")  # libkineto ipcfabric Metadata{size_t size; char type[32]}
REQ_HEAD = struct.Struct("<iiq")  # {int32 type; int32 n; int64 jobid} then int32 pids[n]
DAEMON_NAME = "dynolog"
STOP_GRACE_S = {"hook": 15.0, "kineto": 30.0}
DAEMON_POLL_S = 10.0  # how often libkineto asks the daemon
# libkineto counts iterations only once its profiler is initialised, which the first config does: the
# first iteration-based config is then dropped ("application is not updating iteration count") and
# the same config, sent again at the next poll, is honoured. A process whose profiler was already up
# traces on the first one; its trace then arrives before the second poll and stops the resend.
SENDS_PER_PID = 2
RESEND_GAP_S = 5.0  # a poll round asks more than once within a second: resend at the next round only


@dataclass(slots=True, eq=False)
class DynologStandIn:
    """A minimal dynolog: answers libkineto `req` polls from `configs` (pid -> config text, sent once)."""

    socket_dir: str = ""
    configs: dict[int, str] = field(default_factory=dict)
    answered: dict[int, float] = field(default_factory=dict, init=False)  # pid -> time a config was last sent
    sent: dict[int, int] = field(default_factory=dict, init=False)  # pid -> configs sent
    finished: set[int] = field(default_factory=set, init=False)  # pids whose trace arrived: answer empty
    polls: int = field(default=0, init=False)
    error: str = field(default="", init=False)
    sock: socket.socket | None = field(default=None, init=False)
    thread: threading.Thread | None = field(default=None, init=False)
    stopping: threading.Event = field(default_factory=threading.Event, init=False)

    def address(self) -> str | bytes:
        if self.socket_dir:
            return os.path.join(self.socket_dir, DAEMON_NAME)
        return b"\0" + DAEMON_NAME.encode() + b"\0"  # the trailing NUL is part of the name

    def bind(self) -> bool:
        """Bind the daemon socket; False (and `error`) when it is taken or cannot be bound."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        addr = self.address()
        try:
            if isinstance(addr, str) and os.path.exists(addr):
                if _in_use(addr):
                    raise OSError(98, "address already in use")
                os.unlink(addr)
            sock.bind(addr)
            if isinstance(addr, str):
                os.chmod(addr, 0o666)
        except OSError as exc:
            sock.close()
            shown = addr if isinstance(addr, str) else "@dynolog (abstract)"
            self.error = (f"the libkineto daemon socket {shown} is already bound (a dynolog daemon runs: use "
                          "`dyno gputrace` instead)" if exc.errno == 98 else f"cannot bind {shown}: {exc}")
            return False
        sock.settimeout(0.5)
        self.sock = sock
        self.thread = threading.Thread(target=self._serve, name="perftracker-dynolog", daemon=True)
        self.thread.start()
        return True

    def _serve(self) -> None:
        assert self.sock is not None
        while not self.stopping.is_set():
            try:
                data, sender = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                self._answer(data, sender)
            except (OSError, struct.error, ValueError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"

    def _answer(self, data: bytes, sender: str | bytes) -> None:
        assert self.sock is not None
        if len(data) < METADATA.size or not sender:
            return
        size, raw_type = METADATA.unpack_from(data)
        kind = raw_type.split(b"\0", 1)[0].decode(errors="replace")
        payload = data[METADATA.size:METADATA.size + size]
        if kind == "ctxt":  # GPU context registration: reply with an int32 count
            self.sock.sendto(METADATA.pack(4, b"ctxt") + struct.pack("<i", 1), sender)
            return
        if kind != "req" or len(payload) < REQ_HEAD.size:
            return
        _, count, _ = REQ_HEAD.unpack_from(payload)
        pids = struct.unpack_from(f"<{max(0, min(count, 64))}i", payload, REQ_HEAD.size) if count > 0 else ()
        self.polls += 1
        config = ""
        pid = pids[0] if pids else -1
        resend_ok = time.monotonic() - self.answered.get(pid, -1e9) >= RESEND_GAP_S  # one per poll round
        if pid in self.configs and pid not in self.finished and self.sent.get(pid, 0) < SENDS_PER_PID and resend_ok:
            config = self.configs[pid]
            self.sent[pid] = self.sent.get(pid, 0) + 1
            self.answered[pid] = time.monotonic()
        body = config.encode()
        self.sock.sendto(METADATA.pack(len(body), b"req") + body, sender)

    def close(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
        if self.sock is not None:
            self.sock.close()
            addr = self.address()
            if isinstance(addr, str):
                Path(addr).unlink(missing_ok=True)


def _in_use(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


@dataclass
class _Pending:
    rank: int
    pid: int
    how: str  # hook | kineto
    source: Path  # file to wait for (hook: done marker; kineto: the trace)
    done: bool = False
    last_size: int = -1


@dataclass(slots=True, eq=False)
class TraceSampler:
    name = "traces"
    interval_s = 1.0
    steps: int = 2
    out_dir: Path | None = None  # default RUN/traces; the watcher's incidents collect into their own folder
    pending: list[_Pending] = field(default_factory=list, init=False)
    daemon: DynologStandIn | None = field(default=None, init=False)
    tmp: Path | None = field(default=None, init=False)
    collected: int = field(default=0, init=False)

    def start(self, ctx: LiveContext) -> None:
        req_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        by_spool: dict[Path, list[int]] = {}
        kineto: dict[int, int] = {}  # pid -> rank
        socket_dirs: set[str] = set()
        uncovered: list[int] = []
        for w in ctx.job.workers:
            try:
                env = psutil.Process(w.pid).environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                uncovered.append(w.rank)
                continue
            spool = spool_dir(env, w.parent)
            if hooked_by(spool, w.rank, w.pid):
                by_spool.setdefault(spool, []).append(w.rank)
                marker = spool / "requests" / f"trace-{req_id}.rank-{w.rank}.done"
                self.pending.append(_Pending(w.rank, w.pid, "hook", marker))
            elif env.get("KINETO_USE_DAEMON", "").strip().lower() in {"1", "true", "yes", "on"}:
                kineto[w.pid] = w.rank
                socket_dirs.add(env.get("KINETO_IPC_SOCKET_DIR", ""))
            else:
                uncovered.append(w.rank)
        for spool, ranks in by_spool.items():
            atomic_write_text(spool / "requests" / f"trace-{req_id}.json",
                              json.dumps({"steps": self.steps, "ranks": sorted(ranks), "created_ns": time.time_ns()}))
        if kineto:
            self._start_daemon(ctx, kineto, socket_dirs)
        if uncovered:
            ctx.note(f"traces: {len(uncovered)} rank(s) ({', '.join(map(str, sorted(uncovered)[:16]))}) can be "
                     "traced neither through libkineto's daemon protocol nor the perftracker hook; next time "
                     "launch with KINETO_USE_DAEMON=1 in the environment (no code change) or add `import "
                     "perftracker.hooks; perftracker.hooks.install()` to the training script")

    def _start_daemon(self, ctx: LiveContext, kineto: dict[int, int], socket_dirs: set[str]) -> None:
        if len(socket_dirs) > 1:
            ctx.note(f"traces: workers disagree on KINETO_IPC_SOCKET_DIR ({sorted(socket_dirs)}); using one")
        self.tmp = Path(tempfile.mkdtemp(prefix="perftracker-kineto-"))
        os.chmod(self.tmp, 0o777)  # the job may run as another user
        stem = self.tmp / "kineto.json"
        with ctx.lock:
            med = ctx.progress.steps.median_step_ns()
        # steps between aligned start points: enough to cover the ranks' ~10 s spread of polls
        roundup = max(1, min(1000, int((DAEMON_POLL_S + 2) * 1e9 / med) + 1)) if med else 10
        config = (f"ACTIVITIES_LOG_FILE={stem}\nPROFILE_START_ITERATION=0\n"
                  f"PROFILE_START_ITERATION_ROUNDUP={roundup}\nACTIVITIES_ITERATIONS={self.steps}\n"
                  "ACTIVITIES_DURATION_MSECS=0\nPROFILE_REPORT_INPUT_SHAPES=true\n")
        daemon = DynologStandIn(socket_dir=min(socket_dirs), configs={pid: config for pid in kineto})
        if not daemon.bind():
            ctx.note(f"traces: {daemon.error}; no traces requested through libkineto")
            return
        self.daemon = daemon
        for pid, rank in kineto.items():
            self.pending.append(_Pending(rank, pid, "kineto", self.tmp / f"kineto_{pid}.json"))

    def sample(self, ctx: LiveContext) -> None:
        for item in self.pending:
            if not item.done:
                self._collect(ctx, item)

    def _collect(self, ctx: LiveContext, item: _Pending) -> None:
        traces = self.out_dir or ctx.run_dir / "traces"
        if item.how == "hook":
            if not item.source.exists():
                return
            info = json.loads(item.source.read_text(encoding="utf-8"))
            if info.get("error"):
                ctx.note(f"traces: rank {item.rank} could not start the profiler: {info['error']}")
                item.done = True
                return
            src = item.source.parent.parent / "traces" / str(info.get("file", ""))
            dest = _free_name(traces, item.rank, ".pt.trace.json.gz", src.name)
            if src.resolve() != dest.resolve() and src.parent.resolve() != traces.resolve():
                traces.mkdir(parents=True, exist_ok=True)
                shutil.move(str(src), dest)
        else:
            try:
                size = item.source.stat().st_size
            except OSError:
                return
            if size != item.last_size or size == 0 or not _ends_json(item.source):
                item.last_size = size  # still being written: look again next time
                return
            traces.mkdir(parents=True, exist_ok=True)
            shutil.move(str(item.source), _free_name(traces, item.rank, ".pt.trace.json", item.source.name))
            if self.daemon is not None:
                self.daemon.finished.add(item.pid)
        item.done = True
        self.collected += 1

    def stop(self, ctx: LiveContext) -> None:
        waiting = [p for p in self.pending if not p.done]
        if waiting:
            deadline = time.monotonic() + max(STOP_GRACE_S[p.how] for p in waiting)
            while time.monotonic() < deadline and any(not p.done and psutil.pid_exists(p.pid) for p in waiting):
                self.sample(ctx)
                time.sleep(0.5)
            self.sample(ctx)
        if self.daemon is not None:
            self.daemon.close()
            if self.daemon.error and not self.daemon.answered:
                ctx.note(f"traces: libkineto daemon stand-in: {self.daemon.error}")
        missing = sorted(p.rank for p in self.pending if not p.done)
        if missing:
            how = {p.how for p in self.pending if not p.done}
            hint = (" (libkineto polls about every 10 s and warms up ~6 s: attach for at least 30 s)"
                    if "kineto" in how else " (the hook looks for requests once a second, at optimizer steps)")
            ctx.note(f"traces: no trace arrived from rank(s) {', '.join(map(str, missing[:16]))} before the end"
                     + hint)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def finished(self) -> bool:
        """Every requested trace arrived (or was given up)."""
        return all(p.done for p in self.pending)

    def status(self) -> str:
        if not self.pending:
            return "no rank can be traced"
        polls = f", {self.daemon.polls} daemon poll(s)" if self.daemon is not None else ""
        return f"{self.collected}/{len(self.pending)} trace(s) of {self.steps} step(s){polls}"


def _ends_json(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 64))
            return handle.read().rstrip().endswith(b"}")
    except OSError:
        return False


def _free_name(folder: Path, rank: int, suffix: str, fallback: str) -> Path:
    """`rank-<r><suffix>` in `folder`, or `rank-<r>.<fallback stem>` when that is taken."""
    first = folder / f"rank-{rank}{suffix}"
    if not first.exists():
        return first
    stem = fallback.split(".")[0].replace("rank-", "")
    return folder / f"rank-{rank}.{stem}-{time.strftime('%H%M%S')}{suffix}"
