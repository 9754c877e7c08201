"""`perftracker thresholds`: every declared threshold, its default, unit, what it decides and how it was chosen,
as a table, `--json` or the Markdown reference page (`--markdown`); `--set` / `--thresholds` show the values
a run with those overrides would use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from perftracker.analyzers.thresholds import DECLARED, UNITS, Threshold, Thresholds, shown
from perftracker.cli.options import SetThresholds, ThresholdsFiles, threshold_overrides
from perftracker.cli.voice import terminal
from perftracker.reports.text import printable

DOC_INTRO = """# Thresholds

Every hand-set number a perftracker finding depends on, declared once in
`perftracker/data/thresholds.toml`. This page is generated from that file by
`scripts/gen_thresholds_doc.py` (a test fails when it is stale); `perftracker thresholds` prints the same.

Change one for a run with `--set NAME=VALUE` (repeatable) or `--thresholds FILE.toml` on `analyze`, `attach`, `run`,
`postmortem`, `diff` and `timeline`, or `perftracker.analyzers.analysis.AnalysisOptions(thresholds={NAME: VALUE})`
in Python. A run that changed one records it in findings.json under `thresholds_changed`
(name -> value and default). See docs/guides/thresholds.md.

Units and the range an override must stay in: {units}.
"""


def _by_name() -> list[Threshold]:
    return sorted(DECLARED.values(), key=lambda t: t.name)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def reference_markdown() -> str:
    """The Markdown page docs/reference/thresholds.md: one table row per declared threshold, by name."""
    units = "; ".join(f"`{name}` {unit.describe()}" for name, unit in UNITS.items())
    lines = [DOC_INTRO.replace("{units}", units), f"{len(DECLARED)} thresholds.", "",
             "| name | default | unit | decides | how chosen |", "|---|---|---|---|---|"]
    for t in _by_name():
        lines.append(f"| `{t.name}` | {shown(t.value)} | {_cell(t.unit)} | {_cell(t.decides)} | {_cell(t.chosen)} |")
    return "\n".join(lines) + "\n"


def thresholds(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (name -> value, default, unit, "
                                          "decides, chosen).")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the Markdown reference page "
                                           "(docs/reference/thresholds.md).")] = False,
    set_threshold: SetThresholds = None,
    thresholds_file: ThresholdsFiles = None,
) -> None:
    """List every threshold a finding depends on: name, value, unit, what it decides, how it was chosen.

    Examples:
      perftracker thresholds
      perftracker thresholds --set straggler.alpha=0.005 --json
      perftracker thresholds --markdown > thresholds.md
    """
    table = Thresholds.with_overrides(threshold_overrides(set_threshold, thresholds_file))
    if markdown:
        typer.echo(reference_markdown(), nl=False)
        return
    if as_json:
        typer.echo(json.dumps({t.name: {"value": table.value(t.name), "default": t.value, "unit": t.unit,
                                        "decides": t.decides, "chosen": t.chosen}
                               for t in _by_name()}, indent=2))
        return
    out = Table(title=Text(f"{len(DECLARED)} thresholds (change one with --set NAME=VALUE)"), title_justify="left")
    for col in ("name", "value", "unit", "decides", "how chosen"):
        out.add_column(col, overflow="fold")
    for t in _by_name():
        value = table.value(t.name)
        text = shown(value) if value == t.value else f"{shown(value)} (default {shown(t.value)})"
        out.add_row(Text(t.name), Text(text), Text(t.unit), Text(printable(t.decides)), Text(printable(t.chosen)))
    terminal().print(out)


def write_reference(path: Path) -> None:
    """Write the Markdown reference page to `path` (scripts/gen_thresholds_doc.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reference_markdown(), encoding="utf-8")
