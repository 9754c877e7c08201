"""Report sections: the unit the HTML report is assembled from, and the helpers section functions share.

A section function is `(tables, findings) -> Section | None`; it renders through its Jinja template (autoescape)
and computes no diagnosis. `sanity_section` is the one section of `perftracker sanity`'s page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from perftracker.analyzers.findings import Finding
from perftracker.evidence import as_evidence
from perftracker.evidence.common import PassEvidence

Tables = Mapping[str, pd.DataFrame]


@dataclass(frozen=True)
class Section:
    key: str  # short identifier, used as the HTML anchor
    title: str
    template: str  # the section's template under templates/
    data: Mapping[str, Any] = field(default_factory=dict)  # what the template shows (plain values)
    figures: list[dict[str, Any]] = field(default_factory=list)


SectionFn = Callable[[Tables, list[Finding]], "Section | None"]


def table(tables: Tables, name: str) -> pd.DataFrame:
    """The view `name`, or an empty frame when the output folder does not hold it."""
    frame = tables.get(name)
    return frame if frame is not None else pd.DataFrame()


def cell(value: Any) -> str:
    """A table cell's text: whole numbers without decimals (a rank is "3", not "3.00"), other floats with
    four significant digits (a 2.9 ms spread between 41.2 and 44.1 ms stays visible), anything else as is."""
    if isinstance(value, bool) or not isinstance(value, (float, int)):
        return str(value)
    if isinstance(value, int) or (value == value and abs(value) < 1e15 and float(value).is_integer()):
        return str(int(value))
    return f"{value:.4g}" if value == value else ""


Column = str | tuple[str, Callable[[Any], str]]  # a table column's label, or (label, how a value is shown)


def grid(frame: pd.DataFrame, columns: Mapping[str, Column], limit: int = 64, source: str = "",
         total: int | None = None) -> dict[str, Any]:
    """A table for the `_macros.table` template macro: head labels, rows of cell texts (at most `limit`; each value
    shown by its column's function, else as `cell`), rows left out (of `total` rows when `frame` is already a
    selection of them) and the view that holds every row (`source`: shown as tables/<source>.parquet)."""
    shown = frame.head(limit)
    specs = [spec if isinstance(spec, tuple) else (spec, cell) for spec in columns.values()]
    rows = [[show(v) for (_, show), v in zip(specs, values)] for values in zip(*(shown[c].tolist() for c in columns))]
    return {"head": [name for name, _ in specs], "rows": rows, "source": source,
            "more": max(0, (len(frame) if total is None else total) - len(shown))}


ROLE_TEXT = {"slowest": "slowest #{order}", "host peer": "on its host", "rank neighbour": "its neighbour",
             "median": "median rank"}


def role_text(role: str, order: int) -> str:
    """How a rank of the `rank_focus` view is named: "slowest #1", "on its host", "its neighbour", "median rank"."""
    return ROLE_TEXT.get(role, role).format(order=order)


def rank_layout(tables: Tables) -> tuple[int, bool, str]:
    """(ranks, many, grouped_by) of the `rank_layout` view; (0, False, "rank") for an output without it."""
    layout = table(tables, "rank_layout")
    if layout.empty:
        return 0, False, "rank"
    row = layout.iloc[0]
    return int(row["ranks"]), bool(row["many"]), str(row["grouped_by"])


def focus_rows(frame: pd.DataFrame, focus: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` about the ranks of `focus` (the `rank_focus` view), in its order, with a `shown_as`
    column naming why each rank is there."""
    if frame.empty or focus.empty:
        return frame.iloc[0:0].assign(shown_as=pd.Series(dtype=object))
    why = {int(r): role_text(str(role), int(order)) for r, role, order in zip(focus["rank"], focus["role"], focus["order"])}
    place = {r: i for i, r in enumerate(why)}
    rows = frame[frame["rank"].astype(int).isin(place)]
    rows = rows.assign(shown_as=[why[int(r)] for r in rows["rank"]], _place=[place[int(r)] for r in rows["rank"]])
    return rows.sort_values("_place", kind="stable").drop(columns="_place")


def listed(findings: Iterable[Finding], analyzers: Iterable[str], limit: int | None = None) -> list[dict[str, str]]:
    """severity and title of the findings of `analyzers`, in their order (at most `limit`)."""
    names = set(analyzers)
    items = [{"severity": f.severity.label, "title": f.title} for f in findings if f.analyzer in names]
    return items[:limit] if limit is not None else items


def root_causes(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """The root-cause chain of each straggler finding (`evidence.root_cause`): title, summary, chain."""
    out = []
    for f in findings:
        root = as_evidence(f.evidence, PassEvidence).get("root_cause")
        if not isinstance(root, dict):
            continue
        chain = [{"severity": str(c.get("severity", "")), "title": str(c.get("title", "")),
                  "explains": bool(c.get("explains")),
                  "relation": str(c.get("relation", "explains" if c.get("explains") else "also seen on that host")),
                  "why": str(c.get("why", ""))} for c in root.get("chain", [])]
        out.append({"title": f.title, "summary": str(root.get("summary", "")), "chain": chain})
    return out


SANITY_ROWS = 64
_SANITY_FIXED = ("host", "rank", "device", "status")


def sanity_section(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str], note: str) -> Section:
    """Every device's figures in one table, the slow ones first (the first SANITY_ROWS), and a note with the
    cluster's collective figures; `labels` maps a figure's key to its column title."""
    figures = [k for k in labels if any(k in row for row in rows)]
    head = [*_SANITY_FIXED, *(labels[k] for k in figures)]
    shown = [[cell(row.get(k, "")) for k in (*_SANITY_FIXED, *figures)] for row in rows[:SANITY_ROWS]]
    table = {"head": head, "rows": shown, "more": max(0, len(rows) - SANITY_ROWS), "source": "sanity_devices"}
    return Section(key="sanity", title="Every node's figures (slowest first)", template="section_table.html.j2",
                   data={"note": note, "table": table})
