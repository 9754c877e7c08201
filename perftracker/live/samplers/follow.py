"""Follow files a job writes (NCCL debug logs, its stdout/stderr) and copy them into the run directory.

Copies are appended as the job writes, so nothing is lost if the job dies. `LineTail` is the one reader
of a growing file (also of step records and logs); `Tail` its bounded copier (also NCCL Inspector's).
"""

from __future__ import annotations

import io
import os
import socket
import stat
from pathlib import Path

from perftracker.live.sampler import LiveContext

MAX_CHUNK = 8 * 1024 * 1024


def resolve_nccl_debug_file(pattern: str, host: str, pid: int) -> str:
    """NCCL's %h and %p substitutions (and %% for a literal percent)."""
    return pattern.replace("%%", "\0").replace("%h", host).replace("%p", str(pid)).replace("\0", "%")


class LineTail:
    """Reads what was appended to `path` since `offset` (a file that shrank starts over; a path that is gone or
    not a regular file gives nothing). The file stays open between looks (one stat, and one pread when it grew;
    opened again when the path names another file), closed by `close()` or when the tail is dropped."""

    __slots__ = ("path", "offset", "partial", "_handle", "_identity")

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.partial: bytes = b""  # read_lines: the last line, still being written
        self._handle: io.FileIO | None = None
        self._identity: tuple[int, int] = (-1, -1)  # (st_dev, st_ino) open

    @classmethod
    def at_tail(cls, path: Path, keep: int) -> LineTail:
        """A tail that starts `keep` bytes before the current end, at a line start."""
        try:
            size = path.stat().st_size
        except OSError:
            return cls(path)
        tail = cls(path, max(0, size - keep))
        if tail.offset > 0:
            tail.read_lines()  # drop the cut-off first line
        return tail

    def grown(self, limit: int) -> bytes:
        """Up to `limit` bytes from `offset` on (which the caller moves past what it takes)."""
        try:
            info = os.stat(self.path)
        except OSError:
            self.close()  # removed: its space is not held
            return b""
        if not stat.S_ISREG(info.st_mode):
            return b""
        if info.st_size < self.offset:  # truncated or replaced: start over
            self.offset, self.partial = 0, b""
        if info.st_size == self.offset:
            return b""
        if self._handle is None or self._identity != (info.st_dev, info.st_ino):
            self.close()
            self._handle = io.FileIO(self.path, "r")
            self._identity = (info.st_dev, info.st_ino)
        return os.pread(self._handle.fileno(), min(info.st_size - self.offset, limit), self.offset)

    def read_lines(self) -> list[bytes]:
        """Complete lines appended since the last call (a partial last line waits; blank ones are dropped)."""
        data = self.grown(MAX_CHUNK)
        self.offset += len(data)
        parts = (self.partial + data).replace(b"\r", b"\n").split(b"\n")
        self.partial = parts.pop()
        return [p for p in parts if p.strip()]

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class Tail(LineTail):
    """Copies what was appended to `source` since the last call into `target`, up to MAX_CHUNK a call. With
    `lines`, only complete lines (a line being written waits), at most `cap` bytes in all (then `full`), and
    8 MB without a line end is skipped uncopied."""

    __slots__ = ("target", "lines", "cap", "copied", "full")

    def __init__(self, source: Path, target: Path, lines: bool = False, cap: int = 0) -> None:
        super().__init__(source)
        self.target, self.lines, self.cap = target, lines, cap
        self.copied = 0
        self.full = False

    def pump(self) -> int:
        """Copy what came since the last call; returns bytes copied."""
        if self.full:
            return 0
        room = self.cap - self.copied if self.cap else MAX_CHUNK
        data = self.grown(min(MAX_CHUNK, room))
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


class Copier:
    """What the follow samplers share: their `tails`, pumped every `interval_s` and once more at stop."""

    unit = "file(s)"
    __slots__ = ("interval_s", "tails", "copied")

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.tails: list[Tail] = []
        self.copied = 0

    def sample(self, ctx: LiveContext) -> None:
        for tail in self.tails:
            self.copied += tail.pump()

    def stop(self, ctx: LiveContext) -> None:
        self.sample(ctx)
        for tail in self.tails:
            tail.close()

    def status(self) -> str:
        return f"{len(self.tails)} {self.unit}, {self.copied / 1e6:.1f} MB copied"


class FollowSampler(Copier):
    """Copies NCCL logs and job output into `nccl/` and `output/` of the run directory."""

    name = "logs"
    __slots__ = ("extra_logs",)

    def __init__(self, extra_logs: list[Path] | None = None, interval_s: float = 1.0) -> None:
        super().__init__(interval_s)
        self.extra_logs = extra_logs if extra_logs is not None else []

    def start(self, ctx: LiveContext) -> None:
        import psutil

        # NCCL's own %h, not perftracker's host name (ctx.host may be a --host alias): NCCL substitutes the
        # kernel's hostname up to its first dot, so the file it writes is found by that name.
        nccl_host = socket.gethostname().split(".")[0]
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
                self._add(path, ctx.run_dir / "nccl" / f"{ctx.host}.{w.pid}.log")
            for fd, label in ((1, "stdout"), (2, "stderr")):
                link = Path(f"/proc/{w.pid}/fd/{fd}")
                try:
                    real = Path(os.readlink(link))
                except OSError:
                    continue
                if real.is_file():
                    self._add(real, ctx.run_dir / "output" / f"rank-{w.rank}.{label}.log")
        for log in self.extra_logs:
            self._add(log, ctx.run_dir / "nccl" / f"{ctx.host}.{log.name}")
        if not nccl_debug and not self.extra_logs:
            ctx.note("NCCL logs: the job was started without NCCL_DEBUG; next time launch with NCCL_DEBUG=INFO "
                     "NCCL_DEBUG_FILE=/path/nccl.%h.%p.log (or use `perftracker run`)")
        if not any(t.target.parent.name == "output" for t in self.tails):
            ctx.note("job output: stdout/stderr are a terminal or a pipe, which cannot be read from outside; "
                     "redirect the job's output to a file to have it collected")

    def _add(self, source: Path, target: Path) -> None:
        if all(t.path != source for t in self.tails):
            self.tails.append(Tail(source, target))
