"""The `perftracker` command line: one module per command, assembled here.

Errors for people (`PerftrackerError`) print as one line and exit 2; nothing else prints a
traceback unless PERFTRACKER_DEBUG=1.
"""

from __future__ import annotations

import os
import sys

import typer

from perftracker import __version__
from perftracker.cli import analyze, attach, demo, lint_env, postmortem, ps, report, run
from perftracker.errors import PerftrackerError

app = typer.Typer(
    name="perftracker",
    help="Diagnose slow or stuck distributed training: analyze PyTorch profiler traces, step files and "
    "NCCL logs; get ranked findings with evidence, a self-contained HTML report and JSON.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"perftracker {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """perftracker: performance diagnostics for distributed deep-learning training."""


analyze.register(app)
report.register(app)
demo.register(app)
ps.register(app)
attach.register(app)
run.register(app)
postmortem.register(app)
lint_env.register(app)


def main() -> None:
    try:
        app()
    except PerftrackerError as exc:
        typer.echo(f"perftracker: {exc.message}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("perftracker: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # last resort: a bug, not bad input
        if os.environ.get("PERFTRACKER_DEBUG"):
            raise
        typer.echo(f"perftracker: internal error ({type(exc).__name__}: {exc}). "
                   "Re-run with PERFTRACKER_DEBUG=1 for a traceback and report it.", err=True)
        sys.exit(70)
