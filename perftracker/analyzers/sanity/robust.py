"""Is one unit (a device, a node, a pair) below its peers beyond the noise of those peers (`low_outliers`)?"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from perftracker.analyzers.findings import Severity
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.values import robust_sigma

# The deficit floors with few peers and with many (sanity.many_peers): docs/internals/analyzers.md, sanity/robust.py.
DEVICE_FLOOR = (0.5, 0.15)
LINK_FLOOR = (0.8, 0.3)
MIN_DEFICIT = DEVICE_FLOOR[0]
LEAVE_ONE_OUT_UP_TO = 32


@dataclass(frozen=True)
class Low:
    """One unit below its peers: its value, the peers' median and MAD, the deficit and a severity."""

    unit: str
    value: float
    peer_median: float
    peer_mad: float
    deficit: float
    severity: Severity
    confidence: float

    @property
    def ratio(self) -> float:
        return self.value / self.peer_median if self.peer_median > 0 else 0.0


def _confidence(z: float, n: int) -> float:
    tail = 0.5 * math.erfc(z / math.sqrt(2.0))
    return max(0.0, min(0.999, 1.0 - n * tail))


def low_outliers(values: Mapping[str, float], floor: tuple[float, float] = DEVICE_FLOOR) -> list[Low]:
    """The units below their peers beyond noise (docs/internals/analyzers.md), lowest ratio first; `floor` is the
    least deficit named with few peers and with many (DEVICE_FLOOR, LINK_FLOOR)."""
    found = []
    units = [u for u, v in values.items() if v == v and v >= 0]
    whole = [values[u] for u in units]
    if len(units) > LEAVE_ONE_OUT_UP_TO:  # one unit moves the median and MAD of many little: compute them once
        med_all = statistics.median(whole)
        mad_all = robust_sigma(whole, med_all)
    for unit in units:
        if len(units) > LEAVE_ONE_OUT_UP_TO:
            med, mad = med_all, mad_all
        else:
            others = [values[u] for u in units if u != unit]
            if len(others) < threshold_int('sanity.min_peers'):
                continue
            med = statistics.median(others)
            mad = robust_sigma(others, med)
        if med <= 0:
            continue
        value = values[unit]
        deficit = 1.0 - value / med
        rel_mad = mad / med
        least = floor[0] if len(units) - 1 < threshold_int('sanity.many_peers') else floor[1]
        if deficit < max(least, threshold('sanity.noise_k') * rel_mad):
            continue
        severity = Severity.CRITICAL if value <= threshold('sanity.critical_ratio') * med else Severity.WARNING
        z = deficit / max(rel_mad, MIN_DEFICIT / 10)
        found.append(Low(unit, value, med, mad, deficit, severity, _confidence(z, len(units))))
    return sorted(found, key=lambda low: low.ratio)
