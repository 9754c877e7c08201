"""RDMA port health from counter samples, per host and port: throughput, rail balance, congestion, errors."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any, Unpack

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.network import PortThroughput, RdmaEvidence, Window
from perftracker.store import Store
from perftracker.values import ETHTOOL_COUNTER_PREFIX as ETHTOOL_PREFIX

ACTIVE = 4  # sysfs state "4: ACTIVE"
LINK_ERROR_NAMES = ("symbol_error", "port_rcv_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
                    "port_rcv_remote_physical_errors")
FLAP_NAMES = ("link_downed", "link_error_recovery")  # any increase during the job is a flapping link
TRANSPORT_NAMES = ("local_ack_timeout_err", "out_of_sequence", "packet_seq_err", "implied_nak_seq_err",
                   "rnr_nak_retry_err")
FATAL_NAMES = ("req_transport_retries_exceeded", "req_rnr_retries_exceeded")  # any increase: a QP failed
CNP_NAMES = ("rp_cnp_handled", "np_cnp_sent", "np_ecn_marked_roce_packets")
WRAP_32 = frozenset({  # mlx5 Q counters are 32-bit and wrap
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect", "out_of_buffer",
    "out_of_sequence", "duplicate_request", "rnr_nak_retry_err", "packet_seq_err", "implied_nak_seq_err",
    "local_ack_timeout_err", "resp_local_length_error", "resp_cqe_error", "req_cqe_error",
    "req_remote_invalid_request", "req_remote_access_errors", "resp_remote_access_errors", "resp_cqe_flush_error",
    "req_cqe_flush_error", "req_transport_retries_exceeded", "req_rnr_retries_exceeded", "roce_adp_retrans",
    "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps", "roce_slow_restart_trans"})
_GAUGES = ("state_id", "phys_state_id", "rate_gbps", "width")


def increases(values: np.ndarray[Any, Any], name: str) -> tuple[np.ndarray[Any, Any], int, int]:
    """(increase per interval, wraps, resets) of a cumulative counter's consecutive samples."""
    diff = np.diff(values)
    prev, cur = values[:-1], values[1:]
    drop = diff < 0
    wrap = drop & (name in WRAP_32) & (prev >= 2.0 ** 31) & (prev < 2.0 ** 32)
    out = np.where(wrap, cur + 2.0 ** 32 - prev, np.where(drop, cur, diff))
    return out, int(wrap.sum()), int((drop & ~wrap).sum())


def total(rows: pd.DataFrame, name: str) -> float:
    """The sum of column `name` of `rows` (a counter's increases per interval), 0 without that column."""
    return float(rows[name].sum()) if name in rows else 0.0


def samples(rows: pd.DataFrame) -> pd.DataFrame:
    """Counter rows (ts_ns, name, value) as one row per time stamp, one column per name."""
    return rows.pivot_table(index="ts_ns", columns="name", values="value", aggfunc="last", observed=True).sort_index()


def intervals(wide: pd.DataFrame, lead: dict[str, Any], gauges: Collection[str] = (), fill_gauges: bool = True,
              prefix: str = "") -> tuple[pd.DataFrame, int, int]:
    """One row per interval between consecutive samples of `wide` (`samples`): the `lead` columns, t0_ns, t1_ns,
    dt_s, each counter's increase (its name less `prefix`) and each gauge at the interval's end; with the
    counters' wraps and resets."""
    ts = wide.index.to_numpy(dtype=np.int64)
    cols: dict[str, Any] = {**lead, "t0_ns": ts[:-1], "t1_ns": ts[1:], "dt_s": (ts[1:] - ts[:-1]) / 1e9}
    wraps = resets = 0
    for name in wide.columns:
        col = wide[name].ffill().to_numpy(dtype=float)
        if name in gauges:
            cols[str(name)] = (col if fill_gauges else wide[name].to_numpy(dtype=float))[1:]
            continue
        cols[str(name)[len(prefix):]], w, r = increases(col, str(name))
        wraps, resets = wraps + w, resets + r
    return pd.DataFrame(cols), wraps, resets


def series_of(rows: pd.DataFrame, keys: list[str],
              make: Callable[[dict[str, Any], pd.DataFrame], pd.DataFrame | None]) -> pd.DataFrame:
    """`make(lead, samples)` (`intervals` of them, or None) for each group of counter `rows` by `keys` (`lead`: the
    group's key values), its intervals of positive length concatenated; an empty frame without any."""
    frames = []
    for values, grp in rows.groupby(keys, observed=True):
        out = make(dict(zip(keys, values)), samples(grp))
        if out is not None:
            frames.append(out[out["dt_s"] > 0])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def port_series(store: Store) -> pd.DataFrame:
    """One row per port and sample interval: host, device, port, t0_ns, t1_ns, dt_s, `<counter>` increases,
    and tx_gbps / rx_gbps; gauges (state_id, rate_gbps, width) at the interval's end."""
    def rates(lead: dict[str, Any], wide: pd.DataFrame) -> pd.DataFrame | None:
        if len(wide) < 2:
            return None
        out, wraps, resets = intervals(wide, lead, _GAUGES)
        out["wraps"], out["resets"] = wraps, resets
        for key, name in (("tx_gbps", "port_xmit_data"), ("rx_gbps", "port_rcv_data")):
            out[key] = out[name] * 4 * 8 / out["dt_s"] / 1e9 if name in out else np.nan
        return out

    c = store["counters"]  # the sysfs-style rows of RDMA ports: not GPU rows, not `ethtool:` rows (see rdma_pfc)
    return series_of(c[~c["device"].astype(str).str.startswith("gpu:") & (c["port"].astype(str) != "")
                       & ~c["name"].astype(str).str.startswith(ETHTOOL_PREFIX)], ["host", "device", "port"], rates)


def port_series_view(analysis: Analysis) -> pd.DataFrame:
    """`port_series` of the run."""
    return port_series(analysis.store)


def window_of(g: pd.DataFrame) -> Window:
    start, end = int(g["t0_ns"].min()), int(g["t1_ns"].max())
    return Window(start_ns=start, end_ns=end, seconds=round((end - start) / 1e9, 3))


def port_summary(series: pd.DataFrame, store: Store) -> pd.DataFrame:
    """Per port: window, throughput, gauges, link layer, error and congestion rates."""
    rows = []
    layers = {(str(d.host), str(d.device), str(d.port)): str(d.link_layer)
              for d in store["devices"].itertuples() if d.kind == "nic"}
    for (host, dev, port), g in series.groupby(["host", "device", "port"]):
        row: dict[str, Any] = {"host": host, "device": dev, "port": port, "window": window_of(g),
                               "link_layer": layers.get((str(host), str(dev), str(port)), ""),
                               "wraps": int(g["wraps"].iloc[0]), "resets": int(g["resets"].iloc[0])}
        for gauge in _GAUGES:
            row[gauge] = float(g[gauge].iloc[-1]) if gauge in g else float("nan")
        row["ever_inactive"] = bool("state_id" in g and (g["state_id"] != ACTIVE).any())
        for key in ("tx_gbps", "rx_gbps"):
            row[key] = float(g[key].mean()) if key in g and g[key].notna().any() else 0.0
            row[f"{key}_peak"] = float(g[key].max()) if key in g and g[key].notna().any() else 0.0
        for name in LINK_ERROR_NAMES + FLAP_NAMES + TRANSPORT_NAMES + FATAL_NAMES + CNP_NAMES + (
                "port_xmit_wait", "port_xmit_discards", "out_of_buffer"):
            sampled = name in g and not g[name].isna().all()  # rates per second: mean over the window, interval peak
            row[f"{name}/s"] = float(g[name].sum()) / float(g["dt_s"].sum()) if sampled else 0.0
            row[f"{name}/s_peak"] = float((g[name] / g["dt_s"]).max()) if sampled else 0.0
            row[f"{name}+"] = total(g, name)
        rows.append(row)
    return pd.DataFrame(rows)


def _where(r: Any) -> str:
    return f"{r['device']} port {r['port']} on host {r['host']}"


def _finding(r: Any, check: str, severity: Severity, title: str, advice: str, /,
             **evidence: Unpack[RdmaEvidence]) -> Finding:
    ev = RdmaEvidence(host=r["host"], device=r["device"], port=r["port"], check=check, window=r["window"], **evidence)
    return Finding(analyzer="rdma", severity=severity, title=title, recommendation=advice, evidence=ev,
                   hosts=(str(r["host"]),), key=f"rdma:{check}:{r['host']}:{r['device']}:{r['port']}")


def _rates(r: Any, names: tuple[str, ...]) -> dict[str, float]:
    return {f"{n}_per_s": round(float(r[f"{n}/s"]), 3) for n in names if r[f"{n}+"] > 0}


def _rose(r: Any, names: tuple[str, ...]) -> dict[str, int]:
    return {n: int(r[f"{n}+"]) for n in names if r[f"{n}+"] > 0}


def _over(r: Any, names: tuple[str, ...], limit: str) -> dict[str, float]:
    return {n: float(r[f"{n}/s"]) for n in names if r[f"{n}/s"] >= threshold(limit)}


def _port_findings(r: Any, summary: pd.DataFrame) -> Iterator[Finding]:
    if r["state_id"] == r["state_id"] and r["state_id"] != ACTIVE:
        yield _finding(r, "state", Severity.CRITICAL, f"RDMA port {_where(r)} is not ACTIVE (state "
                       f"{int(r['state_id'])})", "Check the cable and the switch port (ibstat, "
                       "`ip link`); a job that lists this HCA in NCCL_IB_HCA cannot use it.",
                       state_id=int(r["state_id"]), was_inactive_during_window=bool(r["ever_inactive"]))
    peers = summary[(summary["link_layer"] == r["link_layer"]) & (summary["state_id"] == ACTIVE)]
    best_rate, best_width = (float(peers[c].max()) if len(peers) else float("nan") for c in ("rate_gbps", "width"))
    if r["state_id"] == ACTIVE and (r["rate_gbps"] < best_rate or r["width"] < best_width):
        yield _finding(r, "speed", Severity.WARNING,
                       f"RDMA port {_where(r)} runs at {r['rate_gbps']:g} Gb/s ({int(r['width'])}X) where the "
                       f"job's other ports run at {best_rate:g} Gb/s ({int(best_width)}X)",
                       "The link trained below its rated speed or width: reseat or replace the cable / "
                       "transceiver, check the switch port (ibstat, mlxlink).",
                       rate_gbps=r["rate_gbps"], width=r["width"], peer_rate_gbps=best_rate,
                       peer_width=best_width)
    flaps = _rose(r, FLAP_NAMES)
    if flaps:
        yield _finding(r, "flap", Severity.CRITICAL, f"Flapping link on RDMA port {_where(r)}: "
                       + ", ".join(f"{n} +{v}" for n, v in flaps.items()) + f" in {r['window']['seconds']:g} s",
                       "The link went down or retrained during the job: every event stalls NCCL traffic on "
                       "this rail. Replace the cable / transceiver; check the switch port's error log.",
                       increases=flaps, rates=_rates(r, FLAP_NAMES))
    bad = _over(r, LINK_ERROR_NAMES, "rdma.link_errors_per_s")
    if bad:
        yield _finding(r, "link_errors", Severity.WARNING, f"Physical link errors on RDMA port {_where(r)}: "
                       + ", ".join(f"{n} {v:.2f}/s" for n, v in bad.items()),
                       "Symbol / receive errors mean a marginal cable or transceiver; it retransmits and "
                       "may soon flap. Check with mlxlink and replace the part.",
                       rates=_rates(r, LINK_ERROR_NAMES), threshold_per_s=threshold("rdma.link_errors_per_s"))
    fatal, transport = _rose(r, FATAL_NAMES), _over(r, TRANSPORT_NAMES, "rdma.transport_errors_per_s")
    if fatal or transport:
        yield _finding(r, "transport", Severity.CRITICAL if fatal else Severity.WARNING,
                       f"Transport errors on RDMA port {_where(r)}: " + ", ".join(
                           [f"{n} +{v}" for n, v in fatal.items()] + [f"{n} {v:.1f}/s" for n, v in transport.items()]),
                       "Packets are lost or reordered on this path (ACK timeouts, sequence errors): check "
                       "the fabric for congestion drops or a bad link; for RoCE check PFC / ECN settings.",
                       increases=fatal, rates=_rates(r, TRANSPORT_NAMES + FATAL_NAMES),
                       threshold_per_s=threshold("rdma.transport_errors_per_s"))
    cong = (_over(r, CNP_NAMES, "rdma.cnp_per_s") | _over(r, ("port_xmit_wait",), "rdma.xmit_wait_per_s")
            | _over(r, ("port_xmit_discards", "out_of_buffer"), "rdma.drops_per_s"))
    if cong:
        yield _finding(r, "congestion", Severity.WARNING, f"Congestion on RDMA port {_where(r)}: "
                       + ", ".join(f"{n} {v:,.0f}/s" for n, v in cong.items()),
                       "The fabric slows this port down (CNPs / ECN marks / credit waits): look for "
                       "oversubscribed links or many flows sharing this rail; spread traffic over all rails.",
                       rates={f"{n}_per_s": round(v, 1) for n, v in cong.items()},
                       peak_rates={f"{n}_per_s": round(float(r[f"{n}/s_peak"]), 1) for n in cong},
                       thresholds={"cnp_per_s": threshold("rdma.cnp_per_s"),
                                   "xmit_wait_per_s": threshold("rdma.xmit_wait_per_s"),
                                   "drops_per_s": threshold("rdma.drops_per_s")})


def _idle_rails(summary: pd.DataFrame, store: Store) -> Iterator[Finding]:
    cfg = store["config"]
    hca = sorted({str(v) for v in cfg.loc[cfg["key"] == "NCCL_IB_HCA", "value"]})
    active = summary[summary["state_id"] == ACTIVE].assign(traffic=lambda s: s["tx_gbps"] + s["rx_gbps"])
    for (_host, _layer), g in active.groupby(["host", "link_layer"]):
        if len(g) < 2 or g["traffic"].max() < threshold("rdma.busy_gbps"):
            continue
        busiest = g.iloc[int(g["traffic"].to_numpy().argmax())]
        for _, r in g[g["traffic"] < threshold("rdma.idle_rail_share") * busiest["traffic"]].iterrows():
            busy = [f"{d}/{p}" for d, p in zip(g["device"], g["port"]) if f"{d}/{p}" != f"{r['device']}/{r['port']}"]
            yield _finding(r, "idle_rail", Severity.WARNING,
                           f"Idle rail: RDMA port {_where(r)} carried {r['traffic']:.2f} Gb/s while "
                           f"{busiest['device']} carried {busiest['traffic']:.1f} Gb/s",
                           "The job leaves this NIC unused, so its traffic shares fewer rails. An idle NIC "
                           "usually means NCCL_IB_HCA lists only some HCAs (or a typo drops one): list every "
                           "rail, or unset it and let NCCL pick.",
                           traffic_gbps=round(float(r["traffic"]), 3),
                           busiest={"device": busiest["device"], "port": busiest["port"],
                                    "gbps": round(float(busiest["traffic"]), 3)},
                           busy_ports=busy, nccl_ib_hca=list(hca),
                           idle_share=threshold("rdma.idle_rail_share"))


def _throughput(summary: pd.DataFrame) -> Iterator[Finding]:
    for host, g in summary.groupby("host"):
        ports: list[PortThroughput] = [{"device": r["device"], "port": r["port"], "tx_gbps": round(r["tx_gbps"], 3),
                  "rx_gbps": round(r["rx_gbps"], 3), "tx_gbps_peak": round(r["tx_gbps_peak"], 3),
                  "rate_gbps": r["rate_gbps"],
                  "utilization": round(max(r["tx_gbps"], r["rx_gbps"]) / r["rate_gbps"], 4)
                  if r["rate_gbps"] and r["rate_gbps"] == r["rate_gbps"] else None, "window": r["window"]}
                 for _, r in g.iterrows()]
        cap = float(g.loc[g["state_id"] == ACTIVE, "rate_gbps"].sum())
        tx, rx = float(g["tx_gbps"].sum()), float(g["rx_gbps"].sum())
        yield Finding(analyzer="rdma", severity=Severity.INFO,
                      title=(f"Host {host} RDMA: transmit {tx:.1f} Gb/s, receive {rx:.1f} Gb/s over "
                             f"{len(g)} port(s) ({100 * max(tx, rx) / cap:.0f}% of {cap:g} Gb/s)" if cap else
                             f"Host {host} RDMA: transmit {tx:.1f} Gb/s, receive {rx:.1f} Gb/s"),
                      recommendation="Context: mean throughput per port over the sampled window.",
                      evidence=RdmaEvidence(host=str(host), ports=ports), hosts=(str(host),), key=f"rdma:throughput:{host}")


def analyze_rdma(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    series = analysis.view(port_series_view)
    if series.empty:
        return []
    summary = port_summary(series, store)
    per_port = [f for _, r in summary.iterrows() for f in _port_findings(r, summary)]
    return [*per_port, *_idle_rails(summary, store), *_throughput(summary)]
