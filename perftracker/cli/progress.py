"""Progress of long commands on a terminal: traces parsed out of all, rate and time left.

Promise: `parsing_progress(quiet)` is a context manager giving the callback for `LoadOptions.progress`:
on a TTY (and not `--quiet`) a rich progress bar on stderr, "parsing traces N/M", files per second and
the time left, shown once there are at least two files and hidden when the last is parsed; a load that
starts again from 0 (the second run of `diff`) gets a bar of its own; piped, redirected or quiet, no
callback at all, so nothing is printed. The job of saying what happens during a 15 s load, nothing more.
`analyze`, `postmortem`, `diff` and `timeline` use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

Callback = Callable[[int, int], None]


class FilesPerSecond(ProgressColumn):
    """The parsing rate, once there is one."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.1f} files/s" if task.speed else "", style="progress.data.speed")


@contextmanager
def parsing_progress(quiet: bool = False) -> Iterator[Callback | None]:
    if quiet or not sys.stderr.isatty():
        yield None
        return
    progress = Progress(TextColumn("parsing traces"), BarColumn(), MofNCompleteColumn(), FilesPerSecond(),
                        TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    tasks: list[TaskID] = []
    last = [0]

    def update(done: int, total: int) -> None:
        if total < 2:
            return
        if not tasks:
            progress.start()
        if not tasks or done < last[0] or progress.tasks[-1].finished:  # a new load: a bar of its own
            tasks.append(progress.add_task("parse", total=total))
        last[0] = done
        progress.update(tasks[-1], completed=done, total=total, visible=done < total)

    try:
        yield update
    finally:
        if tasks:
            progress.stop()
