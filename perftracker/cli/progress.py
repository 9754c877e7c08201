"""Progress of long commands on a terminal: traces parsed out of all, rate and time left.

`parsing_progress(quiet)` gives the callback for `LoadOptions.progress`: a rich bar on a TTY, no callback at all
when piped, redirected or `--quiet`.
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
