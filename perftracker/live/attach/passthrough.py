"""Pass a job's output stream through to ours and keep a copy of it; our own writing never blocks the job.

An `OutputCopier` drains the job's pipe until it closes: each chunk to our stream and to the copy. A copy that
cannot be written stops for good (`problem()` says why); a failing stream of ours drops that chunk. Either
way the job's pipe keeps draining and its exit code is untouched.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO, cast

_CHUNK = 65536


def _write_all(fd: int, data: bytes) -> None:
    """All of `data` to the file descriptor `fd` (os.write may write a part)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fd_of(stream: IO[bytes] | IO[str] | int | None) -> int | None:
    if stream is None or isinstance(stream, int):
        return stream
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (captured output)
        return None


class OutputCopier:
    """One stream of the job (`name`: stdout or stderr): `source` -> `sink` and `copy`, in a thread of its own."""

    def __init__(self, name: str, source: IO[bytes], sink: IO[bytes] | IO[str] | int | None, copy: Path) -> None:
        self.name = name
        self.copy = copy
        self.copied_bytes = 0
        self.lost_passthrough_bytes = 0
        self._source = source
        self._sink_fd = _fd_of(sink)
        self._sink_stream: IO[bytes] | None = None  # a stream without a descriptor: its binary side
        if self._sink_fd is None and sink is not None and not isinstance(sink, int):
            self._sink_stream = cast(IO[bytes], getattr(sink, "buffer", sink))
        self._copy_error = ""
        self.thread = threading.Thread(target=self._drain, name=f"perftracker-output-{name}", daemon=True)

    def start(self) -> OutputCopier:
        self.thread.start()
        return self

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def problem(self) -> str:
        """What went wrong with the copy, for people ("" when the copy is whole)."""
        if not self._copy_error:
            return ""
        return (f"the copy of the job's {self.name} ({self.copy}) stopped at {self.copied_bytes} bytes "
                f"({self._copy_error}); the job's {self.name} kept passing through, only the copy is short")

    def _drain(self) -> None:
        log = self._open_copy()
        read = getattr(self._source, "read1", self._source.read)
        while True:
            try:
                chunk = read(_CHUNK)
            except (OSError, ValueError):  # our end of the pipe is gone: nothing more can be drained
                break
            if not chunk:
                break
            try:
                self._pass_through(chunk)
                if log is not None:
                    log = self._append(log, chunk)
            except Exception as exc:  # whatever it is, the job's pipe is drained to its end
                self._copy_error = self._copy_error or f"{type(exc).__name__}: {exc}"
                self._sink_fd, self._sink_stream = None, None
                if log is not None:
                    self._close(log)
                log = None
        if log is not None:
            self._close(log)

    def _open_copy(self) -> IO[bytes] | None:
        try:
            self.copy.parent.mkdir(parents=True, exist_ok=True)
            return open(self.copy, "ab", buffering=0)  # noqa: SIM115 -- closed by _drain / _append
        except OSError as exc:
            self._copy_error = exc.strerror or str(exc)
            return None

    def _append(self, log: IO[bytes], chunk: bytes) -> IO[bytes] | None:
        view = memoryview(chunk)
        try:
            while view:  # a full disk takes part of a chunk, then refuses the rest
                written = os.write(log.fileno(), view)
                self.copied_bytes += written
                view = view[written:]
        except OSError as exc:
            self._copy_error = exc.strerror or str(exc)
            self._close(log)
            return None
        return log

    def _close(self, log: IO[bytes]) -> None:
        try:
            log.close()
        except OSError as exc:
            self._copy_error = self._copy_error or (exc.strerror or str(exc))

    def _pass_through(self, chunk: bytes) -> None:
        try:
            if self._sink_fd is not None:
                _write_all(self._sink_fd, chunk)
            elif self._sink_stream is not None:
                self._sink_stream.write(chunk)
                self._sink_stream.flush()
            else:  # our side is closed: the chunk is drained, not shown
                self.lost_passthrough_bytes += len(chunk)
        except (BrokenPipeError, ValueError, TypeError):  # nobody reads our output any more (or cannot): keep draining
            self._sink_fd, self._sink_stream = None, None
            self.lost_passthrough_bytes += len(chunk)
        except OSError:  # a full disk under a redirected stdout, a hung-up terminal: drop this chunk, try the next
            self.lost_passthrough_bytes += len(chunk)

