"""The `perftracker` command line: one module per command (a module-level function), assembled here.

Every command speaks with one voice (cli/voice.py): errors for people (`PerftrackerError`) print as
one line `perftracker: ...` on stderr and exit 2; `--fail-on` is one rule; shared options are defined
once (cli/options.py). Nothing prints a traceback unless PERFTRACKER_DEBUG=1 (a bug: exit 70).
"""

from __future__ import annotations

import os
import sys

import typer

from perftracker._version import __version__
from perftracker.cli import (
    analyze,
    attach,
    demo,
    diff,
    incidents,
    lint_env,
    postmortem,
    ps,
    report,
    run,
    sanity,
    thresholds,
    timeline,
)
from perftracker.cli.voice import EXIT_INTERNAL, EXIT_USAGE, Group, add_command, say
from perftracker.errors import PerftrackerError

app = typer.Typer(
    name="perftracker",
    help="Diagnose slow or stuck distributed training: analyze PyTorch profiler traces, step files and "
    "NCCL logs; get ranked findings with evidence, a self-contained HTML report and JSON.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Group,
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


PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}  # `run`: the launch command after --
for name, command in (("analyze", analyze.analyze), ("report", report.report), ("diff", diff.diff),
                      ("timeline", timeline.timeline), ("demo", demo.demo), ("ps", ps.ps), ("attach", attach.attach),
                      ("run", run.run), ("postmortem", postmortem.postmortem), ("incidents", incidents.incidents),
                      ("lint-env", lint_env.lint_env), ("sanity", sanity.sanity), ("thresholds", thresholds.thresholds)):
    add_command(app, name, command, context_settings=PASS_THROUGH if name == "run" else None)


def main() -> None:
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
