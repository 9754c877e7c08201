"""One voice for every command: how errors are said, and what `--fail-on` means.

A `PerftrackerError` prints as one line `perftracker: <where>: <what>. <What next>.` on stderr, exit 2;
`--fail-on LEVEL` is parsed once (`parse_fail_on`) and made the exit code by `fail_on_exit`; help text reflowed;
`terminal()` the console every command prints to. Details: docs/internals/core.md.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from typer.core import TyperCommand

from perftracker.analyzers.findings import Finding, Severity
from perftracker.errors import PerftrackerError, UsageError
from perftracker.reports.text import print_summary, printable

if TYPE_CHECKING:  # the API (the analysis behind it) is imported by the commands that run one, not by the voice
    from perftracker import api

EXIT_USAGE = 2
EXIT_FINDINGS = 3
EXIT_INTERNAL = 70

PIPED_WIDTH = 160


def terminal() -> Console:
    """The console commands print to (see the module docstring)."""
    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(soft_wrap=True, width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH)


def show(console: Console, text: object, **options: Any) -> None:
    """`text` on `console` as it is: without control characters (`printable`), never read as rich markup."""
    console.print(printable(text), highlight=False, markup=False, **options)


def print_run(console: Console, run: api.Run, written: bool = True) -> None:
    """The verdict and ranked findings of `run` (`reports.text.print_summary`), with its report when `written`."""
    print_summary(console, run.findings, run.report_path if written else None, coverage=run.summary.coverage,
                  synthetic=run.summary.synthetic_inputs or None)


def write_and_say(run: api.Run, out: Path, tell: Callable[[api.Run, bool], None]) -> None:
    """Write `run` into `out`, then `tell` it (written or not): when a file cannot be written, the verdict of the
    finished analysis is told first, then the error raised (exit 2)."""
    from perftracker import api  # here: the voice itself does not import the analysis

    try:
        run.write(out)
    except api.ReportNotWritten as exc:
        tell(exc.result, False)
        raise
    tell(run, True)


def say(text: str) -> None:
    """One line from perftracker itself on stderr, prefixed `perftracker: ` (file names and input text in it
    without control characters: `reports.text.printable`)."""
    typer.echo(f"perftracker: {printable(text)}", err=True)


def as_switch(option: Any) -> Any:
    """A flag (`--help`, `--quiet`, `--gpu/--no-gpu`) listed as the switch it is: without a metavar typer's help
    shows `<bool>` (as if it took a value); an empty one shows nothing."""
    if option is not None:
        option.metavar = ""
    return option


def reflow_help(text: str | None) -> str | None:
    """`text` (a docstring) with each paragraph on one line, so that the terminal wraps it, not the source;
    the paragraph that starts with `Examples:` keeps one line per example. Paragraphs stay apart."""
    if not text:
        return text
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines = [line.strip() for line in paragraph.strip("\n").splitlines() if line.strip()]
        if lines and lines[0].lower().startswith("example"):
            paragraphs.append("\n".join(lines))
        elif lines:
            paragraphs.append(" ".join(lines))
    return "\n\n".join(paragraphs)


class Command(TyperCommand):
    """Every perftracker command (its flags and `--help` without `<bool>`; help paragraphs reflowed by
    `reflow_help`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["help"] = reflow_help(kwargs.get("help"))
        super().__init__(*args, **kwargs)
        for param in self.params:
            if getattr(param, "is_flag", False):
                as_switch(param)

    def get_help_option(self, ctx: Any) -> Any:  # typer's own click types; typed loosely on purpose
        return as_switch(super().get_help_option(ctx))


def add_command(app: typer.Typer, name: str, fn: Callable[..., Any], **settings: Any) -> None:
    """Register the module-level command function `fn` on `app` as `name`, speaking with one voice: its
    PerftrackerError said as one line on stderr, exit 2 (typer reads `fn`'s own parameters through functools.wraps)."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PerftrackerError as exc:
            say(exc.message)
            raise typer.Exit(EXIT_USAGE) from None

    app.command(name, cls=Command, **settings)(command)


def parse_fail_on(value: str | None) -> Severity | None:
    """The severity `--fail-on` names (None when not given); a UsageError for anything else."""
    if not value:
        return None
    try:
        return Severity.parse(value)
    except ValueError as exc:
        raise UsageError(str(exc), "--fail-on") from None


def fail_on_exit(findings: Iterable[Finding], threshold: Severity | None) -> int:
    """Exit code for --fail-on: 3 when a finding at or above `threshold` exists, else 0."""
    if threshold is None:
        return 0
    return EXIT_FINDINGS if any(f.severity >= threshold for f in findings) else 0
