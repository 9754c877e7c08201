"""`perftracker demo`: analyze every bundled sample run and print where each report is."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perftracker.cli.options import out_option, writable_folder
from perftracker.cli.voice import add_command
from perftracker.collectors.loading import LoadOptions
from perftracker.errors import InputError
from perftracker.pipeline import AnalysisResult, ReportNotWritten, analyze_path
from perftracker.reports.text import print_summary


def sample_traces_dir() -> Path:
    """The repository's sample_traces/ (the demo runs from a checkout)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "sample_traces"
        if candidate.is_dir():
            return candidate
    raise InputError("sample_traces/ not found", str(here.parents[2]),
                     "run the demo from a perftracker checkout, or pass your own traces to `perftracker analyze`")


def demo(
    out: Annotated[Path, out_option("Where to write the report.")] = Path("perftracker-demo"),
) -> None:
    """Analyze the bundled sample runs (real jobs, and synthetic ones marked as such in their reports)."""
    root = sample_traces_dir()
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    if not runs:
        raise InputError("no sample run in sample_traces/", str(root), "regenerate it with scripts/make_sample_traces.py")
    writable_folder(out)
    console = Console()
    for run in runs:
        console.rule(f"{run.name}")
        try:
            result = analyze_path(run, out / run.name, LoadOptions(cache_dir=None))
        except ReportNotWritten as exc:  # the verdict is said, then what could not be written
            _print(console, exc.result, written=False)
            raise
        _print(console, result)


def _print(console: Console, result: AnalysisResult, written: bool = True) -> None:
    print_summary(console, result.findings, result.report_path if written else None,
                  coverage=result.document["summary"].get("coverage"),
                  synthetic=result.document["summary"].get("synthetic_inputs"))


def register(app: typer.Typer) -> None:
    add_command(app, "demo", demo)
