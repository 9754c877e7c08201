"""The public API as many tests use it: analyze a run and write its outputs, as `perftracker analyze -o` does.

Nothing here reaches past `perftracker.api`: the tests stand on the API the commands stand on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import perftracker
from perftracker.analyzers.compare.side import RunSide, side_from_tables
from perftracker.errors import InputError
from perftracker.results import Run


def analyzed(path: str | Path, out: str | Path, **options: Any) -> Run:
    """`perftracker.analyze(path, **options)`, written into `out` (report.html, findings.json, tables/)."""
    run = perftracker.analyze(path, **options)
    run.write(out)
    return run


def side_of(path: str | Path, label: str, out: str | Path, **options: Any) -> RunSide:
    """One side of a comparison: a saved analysis read as it is (`perftracker.read`), else analyzed into `out`."""
    try:
        run = perftracker.read(path)
    except InputError:
        run = analyzed(path, out, **options)
    return side_from_tables(label, run.tables, run.findings)
