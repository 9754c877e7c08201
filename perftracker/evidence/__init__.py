"""The evidence of every finding kind, typed: one `TypedDict` per kind, the unit of each number in its annotation.

An analyzer builds its findings' evidence as its kind's type (`StragglerEvidence(...)`), so mypy checks each key
and value it writes; a pass reads another finding's evidence with `as_evidence(f.evidence, T)`; a report asks
`field_of(key, kind)` for a key's label and unit. The tests check every finding made against its kind's type.
"""

from __future__ import annotations

import numbers
import types
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints, is_typeddict

from perftracker.evidence import failures, network, steps, traces
from perftracker.evidence.common import PassEvidence
from perftracker.evidence.units import EvidenceField, Unit, by_name

# Each built-in finding kind (`findings.Kind`, and the sanity and diff verdicts) -> the type of its evidence.
EVIDENCE_OF: Mapping[str, Any] = {**steps.EVIDENCE, **failures.EVIDENCE, **network.EVIDENCE, **traces.EVIDENCE,
                                  "replay": PassEvidence}  # the what-if replay's own finding: its failure only

E = TypeVar("E", bound=Mapping[str, object])


def as_evidence(evidence: Mapping[str, Any], kind: type[E]) -> E:
    """`evidence` read as `kind`'s type: the caller has checked the finding is of that kind (`Kind`, `Mark`)."""
    return cast(E, evidence)


@cache
def declared(kind: str) -> Mapping[str, Any]:
    """Every key `kind`'s evidence may hold (the passes' keys included) -> its annotated type."""
    return {**_hints(PassEvidence), **(_hints(EVIDENCE_OF[kind]) if kind in EVIDENCE_OF else {})}


@cache
def _hints(record: Any) -> Mapping[str, Any]:
    return get_type_hints(record, include_extras=True)


@cache
def units_of(kind: str) -> Mapping[str, Unit | None]:
    """Each key of `kind`'s evidence, and of the records nested in it -> its declared unit (None: no unit)."""
    found: dict[str, Unit | None] = {}

    def walk(hints: Mapping[str, Any]) -> None:
        for key, hint in hints.items():
            found.setdefault(key, _unit_of(hint))
            for inner in _records(hint):
                walk(_hints(inner))

    walk(declared(kind))
    return found


def _unit_of(hint: Any) -> Unit | None:
    """The unit a type declares, of its items for `list[Ms]`, `dict[str, Ms]`, `Ms | None`."""
    unit = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Unit)), None)
    if unit is None and not is_typeddict(hint):
        return next((u for arg in get_args(hint) if (u := _unit_of(arg)) is not None), None)
    return unit


def _records(hint: Any) -> list[Any]:
    """The TypedDicts a type holds at any depth: `list[Row]`, `dict[str, Row]`, `Row | None`."""
    if is_typeddict(hint):
        return [hint]
    return [r for arg in get_args(hint) for r in _records(arg)]


def field_of(key: str, kind: str = "") -> EvidenceField:
    """What `key` of a `kind` finding's evidence is: its label's words (from its name) and its declared unit; a
    key no type declares (a plugin's) takes the unit its name says."""
    named = by_name(key)
    units = units_of(kind)
    if key not in units:
        return named
    unit = units[key] or Unit("")
    return EvidenceField(named.words, unit.unit, unit.rate)


def breaches(kind: str, evidence: Mapping[str, Any]) -> list[str]:
    """What of a `kind` finding's evidence its type does not declare, or types otherwise (empty: it conforms;
    a kind without a declared type, a plugin's, always conforms)."""
    return _record(declared(kind), evidence, "") if kind in EVIDENCE_OF else []


def _record(hints: Mapping[str, Any], record: Mapping[str, Any], at: str) -> list[str]:
    found = [f"{at}{key}: not declared" for key in record if key not in hints]
    return found + [b for key, value in record.items() if key in hints for b in _fits(hints[key], value, f"{at}{key}")]


def _fits(hint: Any, value: Any, at: str) -> list[str]:
    """Why `value` is not a `hint` (at most one reason per value; items of lists and maps checked too)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _fits(args[0], value, at)
    if hint is Any:
        return []
    if is_typeddict(hint):
        return _record(_hints(hint), value, at + ".") if isinstance(
            value, Mapping) else [f"{at}: {type(value).__name__}, not a record"]
    if origin in (Union, types.UnionType):
        return [] if any(not _fits(a, value, at) for a in args) else [f"{at}: {type(value).__name__} is none of {hint}"]
    if origin is list and isinstance(value, (list, tuple)):
        return next((b for item in value if (b := _fits(args[0], item, at + "[]"))), [])
    if origin is dict and isinstance(value, Mapping):
        return next((b for item in value.values() if (b := _fits(args[1], item, at + "{}"))), [])
    number = {int: numbers.Integral, float: numbers.Real}.get(hint)
    if number is not None and isinstance(value, number) and not isinstance(value, bool):
        return []
    if (hint is type(None) and value is None) or (hint in (str, bool) and isinstance(value, hint)):
        return []
    return [f"{at}: {type(value).__name__}, declared {getattr(hint, '__name__', hint)}"]
