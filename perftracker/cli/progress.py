"""Progress of long commands on a terminal: traces parsed out of all, rate and time left.

Promise: `parsing_progress(quiet)` is a context manager giving the callback for `LoadOptions.progress`:
on a TTY (and not `--quiet`) a rich progress bar on stderr, "parsing traces N/M" with the time left,
shown once there are at least two files and removed when the last is parsed; piped, redirected or quiet, a callback that
prints nothing. The job of saying what happens during a 15 s load, nothing more.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

Callback = Callable[[int, int], None]


@contextmanager
def parsing_progress(quiet: bool = False) -> Iterator[Callback | None]:
    if quiet or not sys.stderr.isatty():
        yield None
        return
    progress = Progress(TextColumn("parsing traces"), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True)
    task: list[TaskID] = []

    def update(done: int, total: int) -> None:
        if total < 2:
            return
        if not task:
            task.append(progress.add_task("parse", total=total))
            progress.start()
        progress.update(task[0], completed=done, total=total)
        if done >= total:
            progress.stop()

    try:
        yield update
    finally:
        if task:
            progress.stop()
