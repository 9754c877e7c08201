"""`perftracker report DIR`: re-render report.html from an analyze output folder (no raw traces needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perftracker import api
from perftracker.cli.options import FollowLinks
from perftracker.cli.voice import show, terminal
from perftracker.output_names import FINDINGS


def report(
    path: Annotated[Path, typer.Argument(help="An analyze output folder (holding findings.json and tables/), "
                                         "or a run directory that holds one in perftracker-out/.")],
    follow_links: FollowLinks = False,
) -> None:
    """Re-render the HTML report from findings.json and the saved tables.

    Examples:
      perftracker report out/
      perftracker report run/
    """
    folder = path
    if not (folder / FINDINGS).exists() and (folder / "perftracker-out" / FINDINGS).exists():
        folder = folder / "perftracker-out"
    out = api.render_report(folder, follow_links)
    show(terminal(), f"Report: {out}")
