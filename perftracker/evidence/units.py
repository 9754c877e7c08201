"""The units evidence numbers are declared in, and the label an evidence key's name gives.

A finding kind's evidence type (this room's other modules) annotates each number with one of the aliases below
(`Ms`, `Share`, `GBs`, ...); `EvidenceField` is what a report shows of a key: its words, unit and rate. Constants
and pure functions, no imports from the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any


@dataclass(frozen=True)
class Unit:
    """The unit of an evidence number, and its rate ("per step", "per s") when it is one."""

    unit: str
    rate: str = ""


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


# A number's type with its unit: a share is 0..1, a percent 0..100, a timestamp ns since the epoch.
Ns = Annotated[float, Unit("ns")]
NsPerStep = Annotated[float, Unit("ns", "per step")]
Timestamp = Annotated[int, Unit("timestamp")]
Us = Annotated[float, Unit("us")]
Ms = Annotated[float, Unit("ms")]
MsPerStep = Annotated[float, Unit("ms", "per step")]
S = Annotated[float, Unit("s")]
Share = Annotated[float, Unit("share")]
Pct = Annotated[float, Unit("%")]
GBs = Annotated[float, Unit("GB/s")]
Gbps = Annotated[float, Unit("Gb/s")]
Mbps = Annotated[float, Unit("Mb/s")]
Tflops = Annotated[float, Unit("TFLOPS")]
Bytes = Annotated[int, Unit("bytes")]
MHz = Annotated[float, Unit("MHz")]
W = Annotated[float, Unit("W")]
Celsius = Annotated[float, Unit("°C")]
PerS = Annotated[float, Unit("", "per s")]
PerStep = Annotated[float, Unit("", "per step")]
Json = Any  # a value passed through as read (a parsed record, a configuration value)

_UNITS = {"gbps": "Gb/s", "gbs": "GB/s", "mbps": "Mb/s", "tflops": "TFLOPS", "mhz": "MHz", "pct": "%", "ms": "ms", "us": "us", "ns": "ns", "s": "s",
          "w": "W", "c": "°C", "bytes": "bytes"}
_RATES = ((("per", "step"), "per step"), (("per", "s"), "per s"))
_TIMESTAMP = ("start", "end", "ts", "time", "at")


def by_name(key: str) -> EvidenceField:
    """What a key's name says: `idle_ms_per_step` -> idle, ms, per step; `comm_ms_total` -> comm total, ms;
    `share_last` -> a share; a `start`/`end`/`ts` key in ns -> a timestamp. The words of every label; the unit only
    of a key no evidence type declares (a plugin's)."""
    tokens, rate, unit = key.split("_"), "", ""
    for suffix, name in _RATES:
        if len(tokens) >= len(suffix) and tokens[-len(suffix):] == list(suffix):
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
    words = " ".join(tokens) or ("rate" if rate else "time" if unit in ("ms", "us", "s", "ns") else "size" if unit == "bytes"
                                 else "value")
    return EvidenceField(words, unit, rate)
