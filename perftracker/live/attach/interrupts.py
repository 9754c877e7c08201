"""How a live session is stopped from outside: Ctrl-C, SIGTERM and SIGHUP alike.

While an `Interrupts` is installed, each of the three raises KeyboardInterrupt in the session loop, as Ctrl-C
does; while the session stops (`holding`) further signals are noted and ignored, so nothing is lost
half-written. `received` is the first signal.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupts:
    def __init__(self) -> None:
        self.received: int | None = None
        self._holding = False
        self._previous: dict[int, Any] = {}

    def install(self) -> Interrupts:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Signals received inside are noted, not raised (the session is stopping)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def reason(self) -> str:
        """Why the session stopped, said as the session says it: "interrupted" for Ctrl-C, else the signal."""
        if self.received is None or self.received == signal.SIGINT:
            return "interrupted"
        return signal.Signals(self.received).name

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if not self._holding:
            raise KeyboardInterrupt
