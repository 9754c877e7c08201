"""A finding's evidence as a person reads it: a small table of labels and values with units, rounded.

`evidence_items(evidence, kind)` makes `EvidenceItem`s (units from the kind's evidence type, 3 significant
digits, sub-tables for records); `number(value, unit)` the same formatting for other tables. No markup here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perftracker.evidence import field_of
from perftracker.evidence.units import EvidenceField as Unit

MAX_ROWS = 12
MAX_LIST = 16
MAX_TEXT = 300
_SCALED = {"ns": ((1e9, "s"), (1e6, "ms"), (1e3, "us")), "bytes": ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))}


@dataclass(frozen=True)
class EvidenceTable:
    head: list[str]
    rows: list[list[str]]
    more: int = 0  # rows left out (they are in findings.json)
    numeric: list[bool] = field(default_factory=list)  # per column of `head`: every value a number (aligned right)


@dataclass(frozen=True)
class EvidenceItem:
    label: str
    text: str = ""
    table: EvidenceTable | None = field(default=None)


def number(value: float, unit: str = "") -> str:
    """A number rounded for reading (3 significant digits, thousands grouped), in `unit` when given."""
    if unit == "share":
        return number(100.0 * value, "%")
    if unit in _SCALED:
        for scale, name in _SCALED[unit]:
            if abs(value) >= scale:
                return number(value / scale, name)
        return f"{_rounded(value)} ns" if unit == "ns" else f"{int(value):,} B"
    if unit == "timestamp":
        return f"{int(value)}"
    text = _rounded(value)
    return text + ("%" if unit == "%" else f" {unit.strip()}" if unit.strip() else "")


def measured(value: Any, scale: float = 1.0) -> str:
    """`number(value / scale)`, or "-" for a value not measured (None, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return number(float(value) / scale)


def _rounded(value: float) -> str:
    """3 significant digits (whole numbers from 100 on), thousands grouped."""
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    text = f"{value:.{2 - math.floor(math.log10(abs(value)))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(value: float, unit: str) -> str:
    """A number in a sub-table whose header names the unit (units that scale stay in the cell)."""
    if unit in ("ns", "bytes"):
        return number(value, unit)
    if unit == "share":
        return _rounded(100.0 * value)
    return f"{int(value)}" if unit == "timestamp" else _rounded(value)


def value_text(value: Any, unit: Unit | None = None, with_unit: bool = True, kind: str = "") -> str:
    """One value as short text: a number with its unit, yes/no, a list joined, a record in one line."""
    u = unit or Unit("")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        if not with_unit:
            return _cell(value, u.unit)
        text = number(value, u.unit)
        return f"{text} {u.rate}" if u.rate else text
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"
    if isinstance(value, Mapping) and all(_scalar(v) for v in value.values()):
        return ", ".join(f"{field_of(str(k), kind).words}: {value_text(v, field_of(str(k), kind))}"
                         for k, v in value.items())
    if isinstance(value, Sequence) and all(_scalar(v) for v in value):
        shown = ", ".join(value_text(v, u) for v in list(value)[:MAX_LIST])
        return shown + (f" (+{len(value) - MAX_LIST} more)" if len(value) > MAX_LIST else "")
    text = json.dumps(value, default=str, separators=(", ", ": "))
    return text if len(text) <= 120 else text[:119] + "…"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _records_table(records: Sequence[Mapping[str, Any]], kind: str, first: str = "",
                   keys: Sequence[str] = ()) -> EvidenceTable:
    """Rows of records (a first column of `keys` when given), columns the records' keys in order of appearance."""
    columns: list[str] = []
    for record in records[:MAX_ROWS]:
        columns += [str(k) for k in record if str(k) not in columns]
    units = [field_of(c, kind) for c in columns]
    rows = [([str(keys[i])] if keys else []) + [value_text(record.get(c), u, with_unit=False)
                                                  if c in record else "" for c, u in zip(columns, units)]
            for i, record in enumerate(records[:MAX_ROWS])]
    head = ([first] if keys else []) + [u.header for u in units]
    numeric = ([bool(keys) and all(str(k).lstrip("-").isdigit() for k in keys)]
               if keys else []) + [all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
                                       for r in records[:MAX_ROWS] if c in r) for c in columns]
    return EvidenceTable(head, rows, max(0, len(records) - MAX_ROWS), numeric)


def _item(key: str, value: Any, kind: str) -> EvidenceItem:
    unit = field_of(key, kind)
    label = unit.words or key
    if isinstance(value, Sequence) and not isinstance(value, str) and value and all(
            isinstance(v, Mapping) for v in value):
        return EvidenceItem(label, table=_records_table(value, kind))
    if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
        first = "rank" if key.startswith("per_rank") else ""
        return EvidenceItem(label, table=_records_table(list(value.values()), kind, first, list(value.keys())))
    if isinstance(value, Mapping) and (len(value) > 6 or not all(_scalar(v) for v in value.values())):
        rows = [[field_of(str(k), kind).words or str(k), value_text(v, field_of(str(k), kind), kind=kind)]
                for k, v in value.items()]
        return EvidenceItem(label, table=EvidenceTable(["", ""], rows[:MAX_ROWS], max(0, len(rows) - MAX_ROWS),
                                                       [False, False]))
    return EvidenceItem(label, text=value_text(value, unit, kind=kind))


def evidence_items(evidence: Mapping[str, Any], kind: str = "") -> list[EvidenceItem]:
    """The evidence of one finding of `kind` (its analyzer) as labelled values and sub-tables, in its keys' order."""
    return [_item(str(key), value, kind) for key, value in evidence.items()]
