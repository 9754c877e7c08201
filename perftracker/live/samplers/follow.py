"""Follow files a job writes (NCCL debug logs, its stdout/stderr) and copy them into the run directory.

Copies are appended as the job writes, so nothing is lost if the job dies. `Tail` is the one bounded
appended-bytes copier (also NCCL Inspector's, whole lines only).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from perftracker.live.sampler import LiveContext

MAX_CHUNK = 8 * 1024 * 1024


def resolve_nccl_debug_file(pattern: str, host: str, pid: int) -> str:
    """NCCL's %h and %p substitutions (and %% for a literal percent)."""
    return pattern.replace("%%", "\0").replace("%h", host).replace("%p", str(pid)).replace("\0", "%")


class Tail:
    """Copies what was appended to `source` since the last call into `target`, up to MAX_CHUNK a call (a source
    that shrank starts over). With `lines`, only complete lines (a line being written waits), at most `cap` bytes
    in all (then `full`), and 8 MB without a line end is skipped uncopied."""

    __slots__ = ("source", "target", "lines", "cap", "offset", "copied", "full")

    def __init__(self, source: Path, target: Path, lines: bool = False, cap: int = 0) -> None:
        self.source, self.target, self.lines, self.cap = source, target, lines, cap
        self.offset = self.copied = 0
        self.full = False

    def pump(self) -> int:
        """Copy what came since the last call; returns bytes copied."""
        try:
            info = os.stat(self.source)
        except OSError:
            return 0
        if self.full or not stat.S_ISREG(info.st_mode):
            return 0
        if info.st_size < self.offset:  # truncated or replaced: start over
            self.offset = 0
        if info.st_size == self.offset:
            return 0
        room = self.cap - self.copied if self.cap else MAX_CHUNK
        with open(self.source, "rb") as src:
            src.seek(self.offset)
            data = src.read(min(info.st_size - self.offset, MAX_CHUNK, room))
        end = data.rfind(b"\n") + 1 if self.lines else len(data)
        if end == 0:
            if len(data) >= MAX_CHUNK:  # no line end in 8 MB: not line output; skip it, uncopied
                self.offset += len(data)
            self.full = bool(self.cap) and len(data) >= room
            return 0
        self.target.parent.mkdir(parents=True, exist_ok=True)
        with open(self.target, "ab") as dst:
            dst.write(data[:end])
            dst.flush()
        self.offset += end
        self.copied += end
        self.full = bool(self.cap) and self.copied >= self.cap - 1
        return end


class FollowSampler:
    """Copies NCCL logs and job output into `nccl/` and `output/` of the run directory."""

    name = "logs"
    __slots__ = ("extra_logs", "interval_s", "tails", "copied")

    def __init__(self, extra_logs: list[Path] | None = None, interval_s: float = 1.0) -> None:
        self.extra_logs = extra_logs if extra_logs is not None else []
        self.interval_s = interval_s
        self.tails: list[Tail] = []
        self.copied = 0

    def start(self, ctx: LiveContext) -> None:
        import psutil

        # NCCL's own %h, not perftracker's host name (ctx.host may be a --host alias): NCCL substitutes the
        # kernel's hostname up to its first dot, so the file it writes is found by that name.
        nccl_host = socket.gethostname().split(".")[0]
        seen: set[str] = set()
        nccl_debug = False
        for w in ctx.job.workers:
            try:
                env = psutil.Process(w.pid).environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            nccl_debug = nccl_debug or bool(env.get("NCCL_DEBUG"))
            pattern = env.get("NCCL_DEBUG_FILE")
            if pattern:
                path = Path(resolve_nccl_debug_file(pattern, nccl_host, w.pid))
                if not path.is_absolute():
                    try:
                        path = Path(psutil.Process(w.pid).cwd()) / path
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
                self._add(path, ctx.run_dir / "nccl" / f"{ctx.host}.{w.pid}.log", seen)
            for fd, label in ((1, "stdout"), (2, "stderr")):
                link = Path(f"/proc/{w.pid}/fd/{fd}")
                try:
                    real = Path(os.readlink(link))
                except OSError:
                    continue
                if real.is_file():
                    self._add(real, ctx.run_dir / "output" / f"rank-{w.rank}.{label}.log", seen)
        for log in self.extra_logs:
            self._add(log, ctx.run_dir / "nccl" / f"{ctx.host}.{log.name}", seen)
        if not nccl_debug and not self.extra_logs:
            ctx.note("NCCL logs: the job was started without NCCL_DEBUG; next time launch with NCCL_DEBUG=INFO "
                     "NCCL_DEBUG_FILE=/path/nccl.%h.%p.log (or use `perftracker run`)")
        if not any(t.target.parent.name == "output" for t in self.tails):
            ctx.note("job output: stdout/stderr are a terminal or a pipe, which cannot be read from outside; "
                     "redirect the job's output to a file to have it collected")

    def _add(self, source: Path, target: Path, seen: set[str]) -> None:
        key = str(source)
        if key not in seen:
            seen.add(key)
            self.tails.append(Tail(source, target))

    def sample(self, ctx: LiveContext) -> None:
        for tail in self.tails:
            self.copied += tail.pump()

    def stop(self, ctx: LiveContext) -> None:
        self.sample(ctx)

    def status(self) -> str:
        return f"{len(self.tails)} file(s), {self.copied / 1e6:.1f} MB copied"
