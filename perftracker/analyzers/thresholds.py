"""Thresholds as data: every hand-set number a finding depends on, declared once, overridable per run.

`DECLARED` holds one `Threshold` (name, default value, unit, what it decides, how it was chosen) per entry of
`perftracker/data/thresholds.toml`, read once.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from perftracker.bounded_toml import TomlRefused, read_toml
from perftracker.errors import UsageError

Number = int | float


@dataclass(frozen=True)
class Unit:
    """What a unit allows: the range [low, high] (open where `open_low` / `open_high`), and whole numbers only."""

    low: float
    high: float
    whole: bool = False
    open_low: bool = False
    open_high: bool = False

    def admits(self, value: Number) -> bool:
        if not math.isfinite(value) or (self.whole and value != int(value)):
            return False
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        left, right = "(" if self.open_low else "[", ")" if self.open_high or self.high == INF else "]"
        return f"{kind} in {left}{self.low:g}, {self.high:g}{right}"


INF = math.inf
UNITS: dict[str, Unit] = {
    **dict.fromkeys(("probability", "quantile"), Unit(0.0, 1.0, open_low=True, open_high=True)),
    "share": Unit(0.0, 1.0),
    "excess": Unit(0.0, INF),  # a relative excess: 0.15 is 15% above
    **dict.fromkeys(("ratio", "z"), Unit(0.0, INF, open_low=True)),
    "percent": Unit(0.0, 100.0),
    "count": Unit(1, INF, whole=True),
    **dict.fromkeys(("steps", "ns", "bytes"), Unit(0, INF, whole=True)),
    **dict.fromkeys(("ms", "s", "per_s", "per_min", "Gb/s"), Unit(0.0, INF)),
}


@dataclass(frozen=True)
class Threshold:
    """One declared threshold: `value` is its default (an int for whole-number units)."""

    name: str
    value: Number
    unit: str
    decides: str
    chosen: str


def _leaves(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, value) of a nested TOML table; a table holding `value` is one leaf (a declaration)."""
    for key, item in table.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(item, Mapping) and "value" not in item:
            yield from _leaves(item, name)
        else:
            yield name, item


def _declare() -> dict[str, Threshold]:
    text = resources.files("perftracker").joinpath("data/thresholds.toml").read_text(encoding="utf-8")
    declared: dict[str, Threshold] = {}
    for name, entry in _leaves(tomllib.loads(text)):
        unit = UNITS[entry["unit"]]
        value = int(entry["value"]) if unit.whole else float(entry["value"])
        assert unit.admits(value), f"{name}: default {value} outside its unit {entry['unit']}"
        declared[name] = Threshold(name, value, entry["unit"], entry["decides"], entry["chosen"])
    return declared


DECLARED: dict[str, Threshold] = _declare()


def shown(value: Number) -> str:
    """A threshold's value as people read it: whole numbers in full (16777216), others short (0.01, 5e-05)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def default(name: str) -> Number:
    """The declared default of `name` (for option defaults and help texts, never for a judgement)."""
    return DECLARED[name].value


def _unknown(name: str) -> UsageError:
    close = difflib.get_close_matches(name, DECLARED, n=1, cutoff=0.6)
    if not close:  # a last part alone ("alpha") still finds its family
        close = [n for n in DECLARED if n.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1]][:3]
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return UsageError(f"unknown threshold '{name}'", "--set / --thresholds",
                      hint + "`perftracker thresholds` lists every name")


@dataclass(frozen=True)
class Thresholds:
    """The effective table of one run: the defaults with this run's `overrides` (already checked)."""

    overrides: Mapping[str, Number]

    @classmethod
    def with_overrides(cls, overrides: Mapping[str, object] | None = None) -> Thresholds:
        checked: dict[str, Number] = {}
        for name, raw in (overrides or {}).items():
            if name not in DECLARED:
                raise _unknown(name)
            declared = DECLARED[name]
            unit = UNITS[declared.unit]
            value = _number(raw)
            if value is None or not unit.admits(value):
                raise UsageError(f"threshold {name}={raw!r} is out of range", "--set / --thresholds",
                                 f"give {unit.describe()} ({declared.unit}; default {shown(declared.value)})")
            checked[name] = int(value) if unit.whole else float(value)
        return cls(checked)

    def value(self, name: str) -> Number:
        return self.overrides[name] if name in self.overrides else DECLARED[name].value

    def changed(self) -> dict[str, dict[str, Number]]:
        """Each threshold this run set to another value than its default: name -> {value, default}."""
        return {name: {"value": value, "default": DECLARED[name].value}
                for name, value in sorted(self.overrides.items()) if value != DECLARED[name].value}


def _number(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip().replace("_", ""))
        except ValueError:
            return None
    return None


DEFAULTS = Thresholds({})
_ACTIVE: ContextVar[Thresholds] = ContextVar("perftracker_thresholds", default=DEFAULTS)


@contextmanager
def active(table: Thresholds) -> Iterator[None]:
    """Make `table` the one `threshold()` answers from, until the block ends (nesting restores the outer)."""
    token = _ACTIVE.set(table)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def current() -> Thresholds:
    """The table `threshold()` answers from now (the defaults outside any analysis)."""
    return _ACTIVE.get()


def threshold(name: str) -> Number:
    """The value of declared threshold `name` in the run being analyzed (its default outside one)."""
    return _ACTIVE.get().value(name)


def threshold_int(name: str) -> int:
    """`threshold(name)` for a whole-number threshold (a count of steps, samples, bytes...)."""
    return int(threshold(name))


def parse_assignment(text: str) -> tuple[str, str]:
    """`--set NAME=VALUE` as (NAME, VALUE); UsageError when it is not of that form."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise UsageError(f"--set {text!r} is not NAME=VALUE", "--set", "e.g. --set straggler.alpha=0.005")
    return name.strip(), value.strip()


def read_overrides(path: Path) -> dict[str, object]:
    """A TOML file of overrides (`"straggler.alpha" = 0.005`, or `[straggler]` then `alpha = 0.005`)."""
    try:
        table = read_toml(path, cap=1 << 20)  # bounded: size, nesting and dotted keys checked before parsing
    except OSError as exc:
        raise UsageError(f"cannot read the thresholds file ({exc.strerror or exc})", str(path),
                         "give --thresholds a readable TOML file") from None
    except TomlRefused as exc:
        raise UsageError(f"the thresholds file is {exc}", str(path),
                         "write one NAME = VALUE per line, e.g. \"straggler.alpha\" = 0.005") from None
    return dict(_leaves(table))


def collect_overrides(assignments: list[str] | None, files: list[Path] | None = None) -> dict[str, object]:
    """The overrides of `--thresholds FILE` (in order), then `--set NAME=VALUE` (the last one wins)."""
    overrides: dict[str, object] = {}
    for path in files or []:
        overrides.update(read_overrides(path))
    for text in assignments or []:
        name, value = parse_assignment(text)
        overrides[name] = value
    return overrides
