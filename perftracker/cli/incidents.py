"""`perftracker incidents RUN`: the incidents `attach --watch` / `run --watch` opened, one line each, with the
path of each report; and the watch setup those two commands share (`watch_options`), with the analysis of an
incident (`analyze_incident`, the watcher's `IncidentReporter`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from perftracker import api
from perftracker.analyzers.findings import Severity
from perftracker.cli.voice import show, terminal
from perftracker.errors import InputError, UsageError
from perftracker.live.watch.incidents import INCIDENT_FILE, IncidentVerdict
from perftracker.live.watch.prom import PromPublisher, parse_target
from perftracker.live.watch.watcher import WatchOptions
from perftracker.output_names import REPORT

LOUD = (Severity.WARNING, Severity.CRITICAL)


def watch_options(window: int, rise: float, prom: str | None, incident_seconds: float = 10.0,
                  thresholds: Mapping[str, object] | None = None) -> tuple[WatchOptions, PromPublisher | None]:
    """The watcher's options and `--prom`'s publisher, each incident analyzed with the command's --set /
    --thresholds (`analyze_incident`); a UsageError for a bad N, X or --prom (before any work)."""
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
    reporter = partial(analyze_incident, thresholds=thresholds or {})
    return WatchOptions(window=window, rise=rise, profile_seconds=seconds, baseline_seconds=seconds,
                        reporter=reporter, publish=publisher), publisher


def analyze_incident(evidence: Path, out: Path, thresholds: Mapping[str, object] | None = None) -> IncidentVerdict:
    """The pipeline on one incident's evidence; its outputs in `out` (the incident's folder)."""
    try:
        result = api.analyze(evidence, cache=False, workers=1, analysis=api.AnalysisOptions(thresholds=thresholds or {}))
        result.write(out)
    except api.ReportNotWritten as exc:
        result = exc.result
    loud = [f for f in result.findings if f.severity in LOUD]
    report = out / REPORT
    return IncidentVerdict(result.verdict,
                           tuple(sorted({int(r) for f in loud for r in f.ranks})),
                           tuple(sorted({str(h) for f in loud for h in f.hosts})),
                           str(report) if report.is_file() else "")


def _line(folder: Path, record: dict[str, Any]) -> str:
    ranks = record.get("named_ranks") or record.get("ranks") or []
    what = record.get("verdict") or record.get("trigger") or ""
    step = record.get("step", -1)
    path = record.get("report") or str(folder / INCIDENT_FILE)
    who = f"ranks {','.join(map(str, ranks))}" if ranks else "ranks ?"
    since = f"step {step}" if isinstance(step, int) and step >= 0 else "step ?"
    return f"{folder.name}  {record.get('state', '?')}  {since}  {who}  {str(what)[:160]}  {path}"


def incidents(run: Annotated[Path, typer.Argument(help="A run directory written by attach/run --watch.")]) -> None:
    """List the incidents the watcher opened in RUN: one line each, with the path of its report.

    Examples:
      perftracker incidents run/
      perftracker incidents /shared/runs/job-42/
    """
    if not run.is_dir():
        raise InputError("is not a folder", str(run), "give the run directory attach/run --watch wrote")
    console = terminal()
    folders = sorted(p.parent for p in (run / "incidents").glob(f"*/{INCIDENT_FILE}"))
    if not folders:
        show(console, f"No incidents in {run} (a watched job that stayed healthy, or not watched).")
        return
    for folder in folders:
        try:
            record = json.loads((folder / INCIDENT_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            show(console, f"{folder.name}  unreadable incident.json")
            continue
        if isinstance(record, dict):
            show(console, _line(folder, record), soft_wrap=True)
