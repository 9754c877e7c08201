"""Ask a running `attach` for a stack dump of every rank, now: SIGUSR1, or a file in the run directory.

`RequestWatcher(ctx)` turns `kill -USR1 <attach pid>` and a new (or newly touched) `requests/stacks*` file into
`ctx.progress.hang_requested`; a file's modification time names the snapshot, so one `touch` in a shared run
directory dumps every node's ranks into one folder. `close()` restores the previous SIGUSR1 handler.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Any

from perftracker.live.sampler import LiveContext

REQUESTS = "requests"
PATTERN = "stacks*"


class RequestWatcher:
    def __init__(self, ctx: LiveContext) -> None:
        self.ctx = ctx
        self.folder = ctx.run_dir / REQUESTS
        self.seen: dict[str, int] = self._files()
        self._previous: Any = None
        self.signal_ready = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1")
        if self.signal_ready:
            self._previous = signal.signal(signal.SIGUSR1, self._on_signal)

    def _files(self) -> dict[str, int]:
        """name -> modification time (ns) of the request files there now."""
        found: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for path in self.folder.glob(PATTERN):
                found[path.name] = path.stat().st_mtime_ns
        return found

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.ctx.progress.requested_at = 0.0
        self.ctx.progress.hang_requested = True

    def poll(self) -> None:
        """Turn a new (or newly touched) `requests/stacks*` file into a request."""
        for name, mtime in self._files().items():
            if self.seen.get(name) != mtime:
                self.seen[name] = mtime
                self.ctx.progress.requested_at = mtime / 1e9  # every host names the snapshot alike
                self.ctx.progress.hang_requested = True

    def close(self) -> None:
        if self.signal_ready:
            signal.signal(signal.SIGUSR1, self._previous if self._previous is not None else signal.SIG_DFL)
