"""Ethernet links over time, per host and interface: counter increases per sample interval, and down periods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.health.rdma import increases, intervals, samples, series_of
from perftracker.values import NET_STATE_CHANGE as STATE_CHANGE

GAUGES = frozenset({"operstate_up", "carrier", "admin_up", "speed_mbps", "mtu", "qdisc_backlog_bytes",
                    "qdisc_rate_bps"})
FLAP_COUNTERS = ("carrier_changes", "carrier_down_count")


def link_series_view(analysis: Analysis) -> pd.DataFrame:
    """See docs/internals/analyzers.md."""
    def rates(lead: dict[str, Any], wide: pd.DataFrame) -> pd.DataFrame | None:
        counters = [c for c in wide.columns if c not in GAUGES and c != STATE_CHANGE]
        if counters:  # a link watcher's records hold states only: rates come from full samples
            wide = wide[wide[counters].notna().any(axis=1)]
        wide = wide.drop(columns=[STATE_CHANGE], errors="ignore")
        if len(wide) < 2:
            return None
        out = intervals(wide, {k: str(v) for k, v in lead.items()}, GAUGES, fill_gauges=False)[0]
        for key, name in (("tx_mbps", "tx_bytes"), ("rx_mbps", "rx_bytes")):
            out[key] = out[name] * 8 / out["dt_s"] / 1e6 if name in out else np.nan
        return out

    table = analysis.store["netdev"]
    return pd.DataFrame() if table.empty else series_of(table, ["host", "iface"], rates)


@dataclass(frozen=True)
class Down:
    """One period an interface was down, as its samples show it."""

    host: str
    iface: str
    start_ns: int  # estimated: midway between the last sample up and the first sample down
    end_ns: int  # estimated likewise; -1 when it was still down at the last sample
    earliest_start_ns: int  # the last sample up before it (the period began after this)
    latest_start_ns: int  # the first sample down (or, for a short flap, the interval's end)
    earliest_end_ns: int
    latest_end_ns: int
    samples_down: int
    admin_down: bool  # an administrator (or a script) took it down: IFF_UP cleared
    carrier_changes: int

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9 if self.end_ns >= 0 else float("nan")


def _gauge(wide: pd.DataFrame, name: str) -> np.ndarray:
    if name not in wide:
        return np.full(len(wide), np.nan)
    return wide[name].to_numpy(dtype=float)


def _flap_counts(wide: pd.DataFrame) -> np.ndarray:
    """Per sample, the carrier changes since the previous sample (0 for the first)."""
    best = np.zeros(len(wide))
    for name in FLAP_COUNTERS:
        if name in wide:
            values = pd.Series(wide[name].to_numpy(dtype=float)).ffill().to_numpy()
            inc = np.concatenate([[0.0], increases(values, name)[0]]) if len(values) > 1 else np.zeros(len(values))
            best = np.maximum(best, np.nan_to_num(inc))
    return best


def _watched(ts: np.ndarray, within: np.ndarray, lo: int, hi: int, first: int) -> int:
    """The earliest time the state change into the run of samples `lo..hi` can have happened, by the first link
    watcher's record in the run (its time less its window); -1 when none times it. A regular sample can be taken
    between the change and the watcher's record of it, so the record is not always the run's first sample; a
    record whose window begins after the run's `first` sample (in the same state already) is not about this change."""
    for k in range(lo, hi + 1):
        if not np.isnan(within[k]):
            seen = int(ts[k] - within[k] * 1e9)
            return seen if seen <= first else -1
    return -1


def downs_of(host: str, iface: str, wide: pd.DataFrame) -> list[Down]:
    """The down periods of one interface's samples (`wide`: ts_ns index, one column per row name)."""
    ts = wide.index.to_numpy(dtype=np.int64)
    oper, carrier, admin = _gauge(wide, "operstate_up"), _gauge(wide, "carrier"), _gauge(wide, "admin_up")
    within = _gauge(wide, STATE_CHANGE)  # a watcher saw the state change at most this long before the sample
    known = ~np.isnan(oper) | ~np.isnan(carrier)
    wide, ts, oper, carrier, admin, within = (wide[known], ts[known], oper[known], carrier[known], admin[known],
                                              within[known])
    down = (oper == 0) | (carrier == 0)
    flaps = _flap_counts(wide)
    out: list[Down] = []
    i = 0
    while i < len(ts):
        if not down[i]:
            if i > 0 and not down[i - 1] and flaps[i] >= 2:  # down and up again between two samples
                mid = int((ts[i - 1] + ts[i]) // 2)
                out.append(Down(host, iface, mid, mid, int(ts[i - 1]), int(ts[i]), int(ts[i - 1]), int(ts[i]), 0,
                                False, int(flaps[i])))
            i += 1
            continue
        j = i
        while j + 1 < len(ts) and down[j + 1]:
            j += 1
        before = int(ts[i - 1]) if i > 0 else int(ts[i])
        before = max(before, _watched(ts, within, i, j, int(ts[i])))
        after = int(ts[j + 1]) if j + 1 < len(ts) else -1
        last_down = int(ts[j])
        if after >= 0:
            k = j + 1
            while k + 1 < len(ts) and not down[k + 1]:
                k += 1
            last_down = max(last_down, _watched(ts, within, j + 1, k, after))
        changes = int(flaps[i:j + 2].sum()) if j + 1 < len(ts) else int(flaps[i:j + 1].sum())
        start = (before + int(ts[i])) // 2 if i > 0 else int(ts[i])
        end = (last_down + after) // 2 if after >= 0 else -1
        out.append(Down(host, iface, start, end, before, int(ts[i]), last_down, after, int(j - i + 1),
                        bool((admin[i:j + 1] == 0).any()), changes))
        i = j + 1
    return out


def link_downs_view(analysis: Analysis) -> list[Down]:
    """Every down period of every interface (docs/internals/analyzers.md)."""
    table = analysis.store["netdev"]
    if table.empty:
        return []
    return [down for (host, iface), grp in table[table["iface"] != ""].groupby(["host", "iface"], observed=True)
            for down in downs_of(str(host), str(iface), samples(grp))]


def job_ifaces_view(analysis: Analysis) -> dict[str, dict[str, str]]:
    """{host: {iface: why}} (docs/internals/analyzers.md)."""
    store = analysis.store
    rows = [(str(r.host), str(r.iface), str(r.why)) for r in store["net_ifaces"].itertuples()]
    out: dict[str, dict[str, str]] = {host: {} for host, iface, _ in rows if iface}
    for host, iface, why in rows:
        if why:
            out[host][iface] = why
    for host, iface, _ in rows:
        if not any(out[host].values()) and iface and iface != "lo":
            out[host].setdefault(iface, "")
    table = store["netdev"]
    for host_name, iface in {(str(h), str(i)) for h, i in zip(table["host"], table["iface"]) if str(i)}:
        if host_name not in out and iface != "lo":  # samples without interface records (e.g. node exporter)
            out.setdefault(host_name, {})[iface] = ""
    return out
