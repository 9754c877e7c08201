"""Evidence fields: the unit of each evidence key, from the rule its name follows, and the few exceptions declared.

`field_of(key)` gives a key's label, unit and rate from `EVIDENCE_FIELDS`, else from the rule the names follow.
Constants and pure functions, no imports from the package: analyzers and reports may both import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvidenceField:
    """What an evidence key holds: the words of its label, its unit and its rate."""

    words: str
    unit: str = ""
    rate: str = ""

    @property
    def header(self) -> str:
        """The label with its unit, for the head of a table column: "idle (ms per step)"."""
        shown = {"share": "%", "timestamp": "ns", "bytes": "", "ns": ""}.get(self.unit, self.unit)
        suffix = " ".join(p for p in (shown, self.rate) if p)
        return f"{self.words} ({suffix})" if suffix else self.words


# The evidence keys whose name does not say their unit; every other key's field is the one its name says
# (`_by_name`: `idle_ms_per_step` is idle, ms per step), so a key is declared here only where that rule is wrong.
EVIDENCE_FIELDS: dict[str, EvidenceField] = {
    # wall-clock instants, not durations in ns
    "last_sample_ns": EvidenceField("last sample", "timestamp"),
    "others_last_sample_ns": EvidenceField("others last sample", "timestamp"),
    "window_ns": EvidenceField("window", "timestamp"),
}

_UNITS = {"gbps": "Gb/s", "gbs": "GB/s", "mhz": "MHz", "pct": "%", "ms": "ms", "us": "us", "ns": "ns", "s": "s",
          "w": "W", "c": "°C", "bytes": "bytes"}
_RATES = ((("per", "step"), "per step"), (("per", "s"), "per s"))
_TIMESTAMP = ("start", "end", "ts", "time", "at")


def field_of(key: str) -> EvidenceField:
    """The declared field of `key`, or the one its name says (`_by_name`) when it is not declared."""
    declared = EVIDENCE_FIELDS.get(key)
    return declared if declared is not None else _by_name(str(key))


def _by_name(key: str) -> EvidenceField:
    """The fallback: `idle_ms_per_step` -> idle, ms, per step; `comm_ms_total` -> comm total, ms; `share_last`
    -> a share; a `start`/`end`/`ts` key in ns -> a timestamp."""
    tokens, rate, unit = key.split("_"), "", ""
    for suffix, name in _RATES:
        if len(tokens) > len(suffix) and tokens[-len(suffix):] == list(suffix):
            tokens, rate = tokens[: -len(suffix)], name
            break
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] in _UNITS and (i > 0 or len(tokens[i]) > 1):
            unit = _UNITS[tokens.pop(i)]
            break
    if not unit and "share" in tokens:
        unit = "share"
    if unit == "ns" and tokens and tokens[0] in _TIMESTAMP:
        unit = "timestamp"
    words = " ".join(tokens) or ("time" if unit in ("ms", "us", "s", "ns") else "size" if unit == "bytes"
                                 else "value")
    return EvidenceField(words, unit, rate)
