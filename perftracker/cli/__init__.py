"""The `perftracker` command line: one module per command (a module-level function), assembled here.

Every command speaks with one voice (cli/voice.py): errors for people (`PerftrackerError`) print as
one line `perftracker: ...` on stderr and exit 2; `--fail-on` is one rule; shared options are defined
once (cli/options.py). Nothing prints a traceback unless PERFTRACKER_DEBUG=1 (a bug: exit 70).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from perftracker._version import __version__
from perftracker.cli.voice import EXIT_INTERNAL, EXIT_USAGE, add_command, as_switch, say
from perftracker.errors import PerftrackerError

# the commands in --help order; each runs the function of its name (`-` as `_`) in its module under perftracker/cli/
COMMANDS = ("analyze", "report", "diff", "timeline", "demo", "ps", "attach", "run", "postmortem", "incidents",
            "lint-env", "sanity", "thresholds")
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}  # `run`: the launch command after --


class LazyGroup(TyperGroup):
    """The `perftracker` group, which imports a command's module only when that command is asked for: `--version`,
    a usage error or one command's help do not import the analysis (most of a command's start-up time); its
    `--help` listed as a switch (`voice.as_switch`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[str, Any] = {}

    def list_commands(self, ctx: Any) -> list[str]:  # typer's own click types; typed loosely on purpose
        return list(COMMANDS)

    def get_command(self, ctx: Any, name: str) -> Any:
        if name not in COMMANDS:
            return None
        if name not in self._loaded:
            module = name.replace("-", "_")
            one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            add_command(one, name, getattr(importlib.import_module(f"perftracker.cli.{module}"), module),
                        context_settings=PASS_THROUGH if name == "run" else None)
            self._loaded[name] = typer.main.get_command(one)
        return self._loaded[name]

    def get_help_option(self, ctx: Any) -> Any:
        return as_switch(super().get_help_option(ctx))


app = typer.Typer(
    name="perftracker",
    help="Diagnose slow or stuck distributed training: analyze PyTorch profiler traces, step files and "
    "NCCL logs; get ranked findings with evidence, a self-contained HTML report and JSON.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"perftracker {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, metavar="", help="Show the version and exit."),
) -> None:
    """perftracker: performance diagnostics for distributed deep-learning training."""


def main() -> None:
    # One short command allocates millions of objects that live to its end: a young-object collection every
    # 20,000 allocations, not 700, leaves ~0.2 s of analyze's CPU (5%) to the analysis, at ~2 MB of memory.
    gc.set_threshold(20_000)
    try:
        app()
    except PerftrackerError as exc:  # raised outside a command (commands say their own)
        say(exc.message)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(130)
    except Exception as exc:  # last resort: a bug, not bad input
        if os.environ.get("PERFTRACKER_DEBUG"):
            raise
        say(f"internal error ({type(exc).__name__}: {exc}). Re-run with PERFTRACKER_DEBUG=1 for a traceback "
            "and report it.")
        sys.exit(EXIT_INTERNAL)
