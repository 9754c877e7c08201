"""The report's host-health tables, of the first MAX_HOSTS hosts: per RDMA port, its throughput, congestion and PFC
pauses over time; per GPU, clocks, temperature and power over time and the throttle periods."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.health.gpu_health import gpu_series_view, throttle_view
from perftracker.analyzers.health.rdma import CNP_NAMES, port_series_view, total
from perftracker.analyzers.health.rdma_pfc import pfc_ports_view, pfc_series_view
from perftracker.evidence.network import PfcPauses

MAX_HOSTS = 16
CONGESTION_COUNTERS = (*CNP_NAMES, "port_xmit_wait")
PORT_COLUMNS = ["host", "device", "port", "shown", "sampled", "state_id", "rate_gbps", "tx_gbps", "rx_gbps", "cnp_per_s",
                "pfc", "pfc_rx_priority", "pfc_rx_paused_share", "pfc_rx_frames_per_s",
                "pfc_tx_priority", "pfc_tx_paused_share", "pfc_tx_frames_per_s"]
_KEYS = ["host", "device", "port"]
_SAMPLED = ("state_id", "rate_gbps", "tx_gbps", "rx_gbps", "cnp_per_s")  # NaN for a port without sysfs samples
_DURATION = "_duration"
MAX_PERIODS = 50
SERIES_METRICS = ("sm_clock_mhz", "temp_c", "power_w")
SHADED_REASONS = ("thermal", "hw_slowdown", "power_brake")
SERIES_COLUMNS = ["host", "gpu", "ts_ns", *SERIES_METRICS]
THROTTLE_COLUMNS = ["host", "gpu", "reason", "start_ns", "end_ns"]


def _most_paused(stats: dict[str, PfcPauses]) -> tuple[str, float, float]:
    """(priority, paused share or NaN, pause frames/s) of the most paused priority that moved; ("", NaN, 0)."""
    moved = {p: s for p, s in stats.items() if s["moved"]}
    if not moved:
        return "", float("nan"), 0.0
    prio, s = max(moved.items(), key=lambda kv: (kv[1]["paused_share"] or 0.0, kv[1]["pause_frames_per_s"]))
    share = float(s["paused_share"]) if s["paused_share"] is not None else float("nan")
    return str(prio), share, float(s["pause_frames_per_s"])


def rdma_ports_table(analysis: Analysis) -> pd.DataFrame:
    """One row per RDMA port: state, rate, throughput, congestion and PFC pauses (see the module)."""
    series = analysis.view(port_series_view)
    pfc = {(p.host, p.dev, p.port): p for p in analysis.view(pfc_ports_view)}
    groups = {(str(h), str(d), str(p)): g for (h, d, p), g in series.groupby(_KEYS, observed=True)} \
        if not series.empty else {}
    keys = sorted(set(groups) | set(pfc))
    shown = set(sorted({host for host, _, _ in keys})[:MAX_HOSTS])
    rows, nan = [], float("nan")
    for key in keys:
        g, port = groups.get(key), pfc.get(key)
        row: dict[str, Any] = {**dict(zip(_KEYS, key)), "shown": key[0] in shown, "sampled": g is not None,
                               "pfc": port is not None, **dict.fromkeys(_SAMPLED, nan)}
        if g is not None:
            cnp = sum(total(g, n) for n in CNP_NAMES) / float(g["dt_s"].sum())
            row.update(state_id=float(g["state_id"].iloc[-1]) if "state_id" in g else nan,
                       rate_gbps=float(g["rate_gbps"].iloc[-1]) if "rate_gbps" in g else nan,
                       tx_gbps=float(g["tx_gbps"].mean()), rx_gbps=float(g["rx_gbps"].mean()), cnp_per_s=cnp)
        for direction in ("rx", "tx"):
            prio, share, frames = _most_paused(port.pauses[direction]) if port is not None else ("", nan, 0.0)
            row.update({f"pfc_{direction}_priority": prio, f"pfc_{direction}_paused_share": share,
                        f"pfc_{direction}_frames_per_s": frames})
        rows.append(row)
    return pd.DataFrame(rows, columns=PORT_COLUMNS)


def _hosts_shown(analysis: Analysis) -> list[str]:
    ports = analysis.view(rdma_ports_table)
    return sorted({str(h) for h in ports.loc[ports["shown"].astype(bool), "host"]})


def _shown(frame: pd.DataFrame, hosts: list[str]) -> pd.DataFrame:
    if frame.empty:
        return frame
    frame = frame.assign(host=frame["host"].astype(str), device=frame["device"].astype(str),
                         port=frame["port"].astype(str))
    return frame[frame["host"].isin(hosts)].sort_values([*_KEYS, "t1_ns"], kind="stable")


def rdma_throughput_table(analysis: Analysis) -> pd.DataFrame:
    """host, device, port, t1_ns, tx_gbps, rx_gbps per sample interval of the ports shown."""
    columns = [*_KEYS, "t1_ns", "tx_gbps", "rx_gbps"]
    series = _shown(analysis.view(port_series_view), _hosts_shown(analysis))
    return series[columns].reset_index(drop=True) if not series.empty else pd.DataFrame(columns=columns)


def _rising(analysis: Analysis, view: Callable[[Analysis], pd.DataFrame], value: str,
            risen: Callable[[pd.DataFrame], Iterator[tuple[str, pd.Series]]]) -> pd.DataFrame:
    """host, device, port, t1_ns, counter, `value` of each (counter, value per interval) `risen` names, per port
    shown."""
    columns = [*_KEYS, "t1_ns", "counter", value]
    series = _shown(analysis.view(view), _hosts_shown(analysis))
    frames = [p[[*_KEYS, "t1_ns"]].assign(counter=name, **{value: per})
              for _, p in (series.groupby(_KEYS, sort=True) if not series.empty else []) for name, per in risen(p)]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def rdma_congestion_table(analysis: Analysis) -> pd.DataFrame:
    """host, device, port, t1_ns, counter, per_s of the congestion counters that rose, per port shown."""
    return _rising(analysis, port_series_view, "per_s", lambda p: (
        (name, p[name] / p["dt_s"]) for name in CONGESTION_COUNTERS if name in p and float(p[name].sum()) > 0))


def pfc_paused_table(analysis: Analysis) -> pd.DataFrame:
    """host, device, port, t1_ns, counter, paused_pct of the pause-duration counters that rose, per port shown."""
    return _rising(analysis, pfc_series_view, "paused_pct", lambda p: (
        (str(col)[:-len(_DURATION)], 100 * p[col] / 1e6 / p["dt_s"]) for col in p.columns
        if str(col).endswith("_pause" + _DURATION) and float(p[col].sum()) > 0))


def _gpus_shown(analysis: Analysis) -> list[tuple[tuple[str, int], pd.DataFrame]]:
    wide = analysis.view(gpu_series_view)
    hosts = set(sorted({h for h, _ in wide})[:MAX_HOSTS])
    return [(key, w) for key, w in sorted(wide.items()) if key[0] in hosts]


def gpu_series_table(analysis: Analysis) -> pd.DataFrame:
    """host, gpu, ts_ns, sm_clock_mhz, temp_c, power_w of every sample of the GPUs shown."""
    frames = [pd.DataFrame({"host": host, "gpu": gpu, "ts_ns": w.index.to_numpy(dtype="int64"),
                            **{m: w[m].to_numpy(dtype=float) if m in w else float("nan") for m in SERIES_METRICS}})
              for (host, gpu), w in _gpus_shown(analysis)]
    if not frames:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SERIES_COLUMNS]


def gpu_throttle_table(analysis: Analysis) -> pd.DataFrame:
    """host, gpu, reason, start_ns, end_ns of the throttle periods of the GPUs shown."""
    throttle = analysis.view(throttle_view)
    rows = [(host, gpu, reason, start, end) for (host, gpu), _ in _gpus_shown(analysis) for reason in SHADED_REASONS
            for start, end in throttle[(host, gpu, reason)].periods[:MAX_PERIODS]]
    return pd.DataFrame(rows, columns=THROTTLE_COLUMNS)
