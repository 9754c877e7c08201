"""The watch's options from what a command was given: `--watch-window`, `--watch-rise`, `--prom`,
`--incident-seconds`, and who analyzes an incident.

`watch_setup` returns the `WatchOptions` and the `--prom` publisher, or the UsageError (exit 2) for a bad N,
X or `--prom`, before any work.
"""

from __future__ import annotations

from pathlib import Path

from perftracker.errors import UsageError
from perftracker.live.watch.incidents import IncidentReporter
from perftracker.live.watch.prom import PromPublisher, parse_target
from perftracker.live.watch.watcher import WatchOptions


def watch_setup(window: int, rise: float, prom: str | None, incident_seconds: float = 10.0,
                reporter: IncidentReporter | None = None) -> tuple[WatchOptions, PromPublisher | None]:
    """The watcher's options and `--prom`'s publisher; a UsageError for a bad N, X or --prom."""
    if window < 3:
        raise UsageError(f"--watch-window {window} is too small", "--watch-window", "give 3 steps or more")
    if not 0 < rise < 10:
        raise UsageError(f"--watch-rise {rise:g} is not a fraction above 0", "--watch-rise",
                         "give e.g. 0.2 for 20%")
    publisher = None
    if prom is not None:
        if parse_target(prom) is None and Path(prom).is_dir():
            raise UsageError("is a folder, not a file", prom, "give --prom a file name or [HOST]:PORT")
        try:
            publisher = PromPublisher(prom)
        except OSError as exc:
            raise UsageError(f"cannot serve metrics there ({exc.strerror or exc})", f"--prom {prom}",
                             "choose another port, or give a file name") from None
    seconds = max(1.0, incident_seconds)
    return WatchOptions(window=window, rise=rise, profile_seconds=seconds, baseline_seconds=seconds,
                        reporter=reporter, publish=publisher), publisher
