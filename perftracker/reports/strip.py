"""The summary strip at the top of report.html: what the run is and what costs most, before the findings.

`summary_strip(tables, findings)` lays out the `run_summary` view and the biggest cost as labelled cells; a value
the view could not measure is left out, never shown as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perftracker.analyzers.findings import Finding
from perftracker.reports.evidence import number
from perftracker.reports.json_report import biggest_cost
from perftracker.reports.sections import Tables, table


@dataclass(frozen=True)
class StripCell:
    key: str  # the cell's id suffix (summary-<key>), for anchors and tests
    label: str
    value: str
    detail: str = ""


def _seconds(value: float) -> str:
    return number(value * 1e9, "ns")


def _finite(value: Any) -> float | None:
    try:
        number_ = float(value)
    except (TypeError, ValueError):
        return None
    return number_ if math.isfinite(number_) else None


def _step_cell(row: Any) -> StripCell | None:
    median = _finite(row.get("step_median_s"))
    if median is None:
        return None
    fastest, slowest = _finite(row.get("step_fastest_rank_s")), _finite(row.get("step_slowest_rank_s"))
    step_ranks = int(_finite(row.get("step_ranks")) or 0)
    if fastest is not None and slowest is not None and step_ranks > 1:
        detail = f"median over {step_ranks} ranks; spread across ranks {_seconds(slowest - fastest)}"
        if _seconds(fastest) != _seconds(slowest):  # a range that reads "135 ms to 135 ms" says nothing
            detail += f" ({_seconds(fastest)} to {_seconds(slowest)})"
    else:
        p90 = _finite(row.get("step_p90_s"))
        detail = "one rank" + (f"; p90 {_seconds(p90)}" if p90 is not None else "")
    return StripCell("step", "Step time", _seconds(median), detail)


def summary_strip(tables: Tables, findings: list[Finding]) -> list[StripCell]:
    """The strip's cells, in order (an older output without the `run_summary` table shows what findings give)."""
    cells: list[StripCell] = []
    run = table(tables, "run_summary")
    if not run.empty:
        row = run.iloc[0]
        step = _step_cell(row)
        if step is not None:
            cells.append(step)
        ranks = int(_finite(row.get("ranks")) or 0)
        if ranks:
            cells.append(StripCell("ranks", "Ranks", f"{ranks:,}"))
        hosts = int(_finite(row.get("hosts")) or 0)
        if hosts:
            names = str(row.get("host_names") or "")
            cells.append(StripCell("hosts", "Hosts", f"{hosts:,}", names if hosts <= 4 else ""))
    top = biggest_cost(findings)
    if top is not None:
        cells.append(StripCell("cost", "Biggest cost",
                               f"{_seconds(top.cost.seconds_per_step)} per step"
                               + (f" ({number(top.cost.share_of_step, 'share')} of the step)"
                                  if top.cost.share_of_step > 0 else ""), top.title))
    return cells
