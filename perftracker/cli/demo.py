"""`perftracker demo`: analyze every bundled sample run; print where each report is, and link them in index.html."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perftracker import api
from perftracker.analyzers.findings import Severity
from perftracker.cli.options import out_option, writable_folder
from perftracker.cli.voice import print_run, show, terminal, write_and_say
from perftracker.errors import InputError
from perftracker.reports.templating import write_page


@dataclass(frozen=True)
class IndexEntry:
    """One sample run on the demo's index.html (templates/index.html.j2: a static page, every text escaped)."""

    name: str
    verdict: str
    severity: str  # critical | warning | ok
    report: str  # relative to the index
    synthetic: bool


def sample_traces_dir(explicit: Path | None = None) -> Path:
    """The sample runs: `--samples DIR` when given, else those installed with the package
    (`perftracker/samples/`, which a wheel carries: setup.py copies sample_traces/ there), else the checkout's
    sample_traces/ (above this module in a source checkout or an editable install), else ./sample_traces."""
    if explicit is not None:
        if not explicit.is_dir():
            raise InputError("not a folder", str(explicit), "give --samples the sample_traces/ folder of a "
                             "perftracker checkout")
        return explicit
    here = Path(__file__).resolve()
    installed = here.parents[1] / "samples"
    for candidate in (installed, *(parent / "sample_traces" for parent in here.parents), Path.cwd() / "sample_traces"):
        if candidate.is_dir():
            return candidate
    raise InputError("the sample runs are not installed with the package (perftracker/samples/ is missing: "
                     "this install was not built with them; they are the sample_traces/ folder of perftracker's "
                     "source checkout, 1 MB)", "demo",
                     "run it from a checkout (`bash scripts/demo.sh`, or `perftracker demo` in its root), or point "
                     "it at a copy with `perftracker demo --samples DIR`")


def demo(
    out: Annotated[Path, out_option("Where to write the reports and their index.html.")] = Path("perftracker-demo"),
    full: Annotated[bool, typer.Option("--full", help="Print every sample's ranked findings, not only its verdict.")]
    = False,
    samples: Annotated[Path | None, typer.Option("--samples", help="The sample runs' folder (sample_traces/ of a "
                                                 "perftracker checkout); default: the checkout this perftracker "
                                                 "runs from, or ./sample_traces.")] = None,
) -> None:
    """Analyze the bundled sample runs (real jobs, and synthetic ones marked as such in their reports); write
    one index.html linking their reports.

    Examples:
      perftracker demo -o demo/
      perftracker demo -o demo/ --full
    """
    root = sample_traces_dir(samples)
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    if not runs:
        raise InputError("no sample run in sample_traces/", str(root), "regenerate it with scripts/make_sample_traces.py")
    writable_folder(out)
    console = terminal()
    entries = []
    for run in runs:
        if full:
            console.rule(f"{run.name}")
        result = api.analyze(run, cache=False)
        write_and_say(result, out / run.name, partial(_print, console, full, run.name))
        summary = result.summary
        top = max((f.severity for f in result.findings), default=Severity.INFO)
        entries.append(IndexEntry(run.name, summary.verdict, "ok" if top == Severity.INFO else top.label,
                                  f"{run.name}/report.html", bool(summary.synthetic_inputs)))
    write_page(out / "index.html", "index.html.j2", title="perftracker demo: the bundled sample runs", entries=entries)
    show(console, f"Reports of {len(entries)} sample runs: {out / 'index.html'}")


def _print(console: Console, full: bool, name: str, result: api.Run, written: bool) -> None:
    """Every finding (`--full`, or a report not written), else the verdict line of the sample run `name`."""
    if full or not written:
        print_run(console, result, written)
    else:
        tag = " (Synthetic inputs: a demonstration, not measurements)" if result.summary.synthetic_inputs else ""
        show(console, f"{name}{tag}: {result.summary.verdict}")
