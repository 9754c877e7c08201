"""PFC pauses, pause storms and NIC drops of RoCE ports, from `ethtool -S` counters (`ethtool:<name>` rows)."""

from __future__ import annotations

import re
from typing import Unpack

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.rdma import CNP_NAMES, increases, intervals, series_of, total, window_of
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.network import PfcPauses, RdmaPfcEvidence
from perftracker.store import Store
from perftracker.values import ETHTOOL_COUNTER_PREFIX as PREFIX

# rdma_pfc.pause_share, rdma_pfc.pause_frames_per_s: see perftracker/data/thresholds.toml (how they were chosen).
STORM_ERROR, STORM_WARNING = "tx_pause_storm_error_events", "tx_pause_storm_warning_events"
_PAUSE = re.compile(r"^(?P<dir>rx|tx)_(?:prio(?P<prio>\d)_pause|global_pause|pause_ctrl_phy)(?P<kind>_duration|"
                    r"_transition)?$")
DISCARD = re.compile(r"^(?:(?:rx|tx)_discards_phy|rx_prio\d_(?:buf_discard|cong_discard|discards)|rx_out_of_buffer|"
                     r"outbound_pci_buffer_overflow|dev_out_of_buffer)$")


def pfc_series(store: Store) -> pd.DataFrame:
    """One row per port and sample interval: host, device, port, t0_ns, t1_ns, dt_s and the increase of
    every `ethtool:<name>` counter, as a column `<name>`."""
    c = store["counters"]
    return series_of(c[c["name"].astype(str).str.startswith(PREFIX)], ["host", "device", "port"], lambda lead, wide: (
        intervals(wide, {k: str(v) for k, v in lead.items()}, prefix=PREFIX)[0] if len(wide) >= 2 else None))


def _peak(g: pd.DataFrame, col: str) -> float | None:
    peak = float((g[col] / 1e6 / g["dt_s"]).max())
    return round(peak, 4) if peak == peak else None


def pauses(g: pd.DataFrame) -> dict[str, dict[str, PfcPauses]]:
    """{"rx"|"tx": {priority ("0".."7" or "global"): paused_share (None without a duration counter),
    peak_interval_share, pause_frames_per_s, pause_episodes_per_s, mean_pause_us}} of one port's intervals."""
    total_s = float(g["dt_s"].sum())
    raw: dict[str, dict[str, dict[str, str]]] = {"rx": {}, "tx": {}}
    for col in g.columns:
        m = _PAUSE.match(str(col))
        if m:
            raw[m.group("dir")].setdefault(m.group("prio") or "global", {})[m.group("kind") or "frames"] = str(col)
    out: dict[str, dict[str, PfcPauses]] = {"rx": {}, "tx": {}}
    for direction, prios in raw.items():
        for prio, cols in sorted(prios.items()):
            dur = cols.get("_duration")
            frames, episodes = total(g, cols.get("frames", "")), total(g, cols.get("_transition", ""))
            us = total(g, dur) if dur else 0.0
            out[direction][prio] = {
                "paused_share": round(us / 1e6 / total_s, 4) if dur else None,
                "peak_interval_share": _peak(g, dur) if dur else None,
                "pause_frames_per_s": round(frames / total_s, 2), "pause_episodes_per_s": round(episodes / total_s, 2),
                "mean_pause_us": round(us / episodes, 1) if dur and episodes else None, "moved": bool(frames or us)}
    return out


def _flagged(stats: PfcPauses) -> bool:
    share = stats["paused_share"]
    return bool(share >= threshold("rdma_pfc.pause_share")) if share is not None else stats["pause_frames_per_s"] >= threshold("rdma_pfc.pause_frames_per_s")


def _sysfs_rates(store: Store, host: str, dev: str, port: str) -> dict[str, float]:
    """Per-second rates of the port's sysfs ECN / CNP counters over its samples (absent names left out)."""
    c = store["counters"]
    c = c[(c["host"].astype(str) == host) & (c["device"] == dev) & (c["port"] == port)
          & c["name"].astype(str).isin(CNP_NAMES)]
    out = {}
    for name, g in c.groupby("name", observed=True):
        g = g.sort_values("ts_ns")
        span = (int(g["ts_ns"].iloc[-1]) - int(g["ts_ns"].iloc[0])) / 1e9
        if span > 0:
            out[f"{name}_per_s"] = round(float(np.nansum(increases(g["value"].to_numpy(float), str(name))[0])) / span, 2)
    return out


class _Port:
    def __init__(self, store: Store, key: tuple[str, str, str], g: pd.DataFrame, netdevs: dict[tuple[str, str, str],
                                                                                             str]) -> None:
        self.store, self.g = store, g
        self.host, self.dev, self.port = key
        self.netdev = netdevs.get(key, "") or self.dev
        self.window = window_of(g)
        self.pauses = pauses(g)
        self.lossless = sorted(p for p in set(self.pauses["rx"]) | set(self.pauses["tx"]) if p != "global")

    @property
    def where(self) -> str:
        nd = f" ({self.netdev})" if self.netdev != self.dev else ""
        return f"{self.dev} port {self.port}{nd} on host {self.host}"

    def finding(self, check: str, severity: Severity, title: str, advice: str, /,
                **evidence: Unpack[RdmaPfcEvidence]) -> Finding:
        ev = RdmaPfcEvidence(host=self.host, device=self.dev, port=self.port, netdev=self.netdev, check=check,
                             window=self.window, lossless_priorities=self.lossless, **evidence)
        return Finding(analyzer="rdma_pfc", severity=severity, title=title, recommendation=advice, evidence=ev,
                       hosts=(self.host,), key=f"rdma_pfc:{check}:{self.host}:{self.dev}:{self.port}")


def _pause_finding(p: _Port, direction: str) -> Finding | None:
    stats = p.pauses[direction]
    per_prio = {k: v for k, v in stats.items() if k != "global"}
    candidates = per_prio if any(v["moved"] for v in per_prio.values()) else stats
    hot = {k: v for k, v in candidates.items() if _flagged(v)}
    if not hot:
        return None
    prio, worst = max(hot.items(), key=lambda kv: (kv[1]["paused_share"] or 0.0, kv[1]["pause_frames_per_s"]))
    secs, label = p.window["seconds"], "priority " + prio if prio != "global" else "link-level pause (all priorities)"
    amount = (f"paused {100 * worst['paused_share']:.0f}% of {secs:g} s" if worst["paused_share"] is not None else
              f"{worst['pause_frames_per_s']:,.0f} pause frames/s over {secs:g} s")
    cc = _sysfs_rates(p.store, p.host, p.dev, p.port)
    cnps = sum(cc.values())
    ecn = (f"DCQCN is acting ({cnps:,.0f} CNP / ECN events/s on this port) yet PFC still triggers: the switch's ECN "
           f"marking threshold for this queue may sit above its PFC xoff threshold; lower it so senders slow down "
           f"before the switch pauses." if cnps > 0 else
           "No ECN marks or CNPs on this port: congestion control (DCQCN) is not acting, so PFC is the only brake. "
           "Enable ECN marking on the switch queue of this priority, below its PFC xoff threshold, and DCQCN on the "
           "NICs, so congestion control acts before PFC." if cc else
           "Check that ECN marking (switch) and DCQCN (NIC) are on, so congestion control acts before PFC.")
    qos = (f"Check the PFC / ECN configuration of {label} on the switch port and with `mlnx_qos -i {p.netdev}` "
           "(PFC enabled on the lossless priority only, trust mode pcp/dscp as the fabric expects); check that "
           "NCCL_IB_TC / NCCL_IB_SL put NCCL traffic on that priority.")
    if direction == "rx":
        title = f"PFC pause received on {p.where}: {label} {amount}"
        advice = (f"The switch tells this NIC to stop sending on {label}: congestion downstream (an incast onto a "
                  "receiver, a slow receiver elsewhere: look for PFC pause-sent findings on other hosts, or a "
                  f"lossless-queue misconfiguration). {qos} {ecn}")
    else:
        title = f"PFC pause sent by {p.where}: {label} {amount}"
        advice = (f"This NIC tells the switch to stop sending on {label}: it cannot drain its receive buffer into "
                  "host memory. Look at the host side: PCIe (width / speed in lspci, outbound_pci_* counters, "
                  "ACS / IOMMU settings), CPU or memory pressure, the NIC's NUMA placement, a receiver that does "
                  f"not post receive buffers. This host may be the slow receiver pausing the fabric. {qos}")
    return p.finding(f"pfc_{direction}", Severity.WARNING, title, advice, priority=prio, priorities=stats,
                     share_of_time=worst["paused_share"] or 0.0, congestion_control=cc,
                     thresholds={"paused_share": threshold("rdma_pfc.pause_share"),
                                 "pause_frames_per_s": threshold("rdma_pfc.pause_frames_per_s")})


def _storm_finding(p: _Port) -> Finding | None:
    err, warn = total(p.g, STORM_ERROR), total(p.g, STORM_WARNING)
    if err <= 0 and warn <= 0:
        return None
    tx = {k: v["pause_frames_per_s"] for k, v in p.pauses["tx"].items()}
    prio = max(tx, key=lambda k: tx[k]) if tx and max(tx.values()) > 0 else (",".join(p.lossless) or "unknown")
    secs = p.window["seconds"]
    what = (f"{STORM_ERROR} +{err:.0f}" if err > 0 else f"{STORM_WARNING} +{warn:.0f}") + f" in {secs:g} s"
    title = f"PFC pause storm on {p.where} (priority {prio}): {what}"
    advice = ("The NIC's PFC storm watchdog fired: it sent pause frames for a long period"
              + (" and then stopped sending them, so lossless traffic may have been dropped while PFC was off. "
                 if err > 0 else ". ")
              + "A receive path stalled: a hung or overloaded host, PCIe errors, a process that stopped consuming. "
              f"Check the host (dmesg, PCIe errors), the watchdog timeout (`ethtool --get-tunable {p.netdev} "
              f"pfc-prevention-tout`), and the priority's PFC setup (`mlnx_qos -i {p.netdev}`).")
    return p.finding("pfc_storm", Severity.CRITICAL if err > 0 else Severity.WARNING, title, advice, priority=prio,
                     increases={STORM_ERROR: int(err), STORM_WARNING: int(warn)})


def _discard_finding(p: _Port) -> Finding | None:
    total_s = float(p.g["dt_s"].sum())
    rates = {str(n): total(p.g, str(n)) / total_s for n in p.g.columns if DISCARD.match(str(n))}
    bad = {n: v for n, v in rates.items() if v >= threshold("rdma.drops_per_s")}
    if not bad:
        return None
    prios = sorted({m.group(1) for n in bad if (m := re.match(r"rx_prio(\d)_", n))})
    prio = ",".join(prios) if prios else "not given by the counters"
    lossless = ",".join(p.lossless) or "none seen"
    title = (f"Packet drops on RoCE port {p.where}" + (f" (priority {prio})" if prios else "") + ": "
             + ", ".join(f"{n} {v:,.1f}/s" for n, v in bad.items()) + f" over {p.window['seconds']:g} s")
    advice = ("Packets are dropped on this port; on a lossless RoCE class every drop costs a retransmission "
              "(go-back-N, a stall of the flow). Receive-buffer drops (rx_discards_phy, rx_prio*_buf_discard) "
              f"mean PFC is not protecting this traffic: PFC is enabled on priority {lossless} here; check with "
              f"`mlnx_qos -i {p.netdev}` and the switch that NCCL traffic (NCCL_IB_TC / NCCL_IB_SL) lands on that "
              "priority and that the buffers are sized for the cable length. rx_out_of_buffer concerns the kernel's "
              "receive rings (non-RDMA traffic: `ethtool -G`); outbound_pci_buffer_overflow means PCIe cannot keep up.")
    return p.finding("discards", Severity.WARNING, title, advice, priority=prio,
                     rates={f"{n}_per_s": round(v, 3) for n, v in bad.items()},
                     increases={n: int(total(p.g, n)) for n in bad}, threshold_per_s=threshold("rdma.drops_per_s"))


def pfc_series_view(analysis: Analysis) -> pd.DataFrame:
    """`pfc_series` of the run."""
    return pfc_series(analysis.store)


def pfc_ports_view(analysis: Analysis) -> list[_Port]:
    """Per-port views of the run's flow-control counters (window, pauses per direction and priority)."""
    series = analysis.view(pfc_series_view)
    if series.empty:
        return []
    d = analysis.store["devices"]
    nd = {(str(r.host), str(r.device), str(r.port)): str(r.netdevs).split(",")[0]
          for r in d[d["kind"] == "nic"].itertuples()}
    return [_Port(analysis.store, (str(h), str(d), str(p)), g.reset_index(drop=True), nd)
            for (h, d, p), g in series.groupby(["host", "device", "port"])]


def analyze_rdma_pfc(analysis: Analysis) -> list[Finding]:
    return [f for p in analysis.view(pfc_ports_view)
            for f in (_pause_finding(p, "rx"), _pause_finding(p, "tx"), _storm_finding(p), _discard_finding(p))
            if f is not None]
