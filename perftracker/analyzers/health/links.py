"""Ethernet link faults per host, joined to what the job felt (analyzer `links`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import clock_utc
from perftracker.analyzers.findings import Cost, Finding, Kind, Severity
from perftracker.analyzers.health.link_series import Down, job_ifaces_view, link_downs_view, link_series_view
from perftracker.analyzers.health.link_stalls import (
    Stall,
    comm_share_view,
    job_steps_view,
    stall_during,
)
from perftracker.analyzers.health.rdma import total
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.network import LinkDown, LinkMeasures, LinksEvidence, LinkStat, PeerSaw
from perftracker.values import finite

ERROR_NAMES = ("rx_crc_errors", "rx_frame_errors", "rx_length_errors", "rx_errors", "tx_errors",
               "tx_carrier_errors", "tx_aborted_errors", "tx_heartbeat_errors", "tx_window_errors")
DROP_NAMES = ("rx_dropped", "tx_dropped", "rx_missed_errors", "rx_fifo_errors", "rx_over_errors", "tx_fifo_errors",
              "qdisc_drops")
VIRTUAL = ("lo", "veth", "docker", "br-", "virbr", "cni", "flannel", "cali", "tunl", "vxlan", "ifb", "tun", "tap",
           "kube", "weave", "cilium", "genev", "nodelocaldns")


def _series(analysis: Analysis, host: str, iface: str) -> pd.DataFrame:
    s = analysis.view(link_series_view)
    if s.empty:
        return s
    return s[(s["host"] == host) & (s["iface"] == iface)]


def _job_window(analysis: Analysis) -> tuple[int, int] | None:
    steps = analysis.view(job_steps_view)
    if steps.empty:
        return None
    return int(steps["start_ns"].min()), int(steps["end_ns"].max())


def _what_peer_saw(analysis: Analysis, host: str, down: Down, judged: dict[str, dict[str, str]]) -> PeerSaw | None:
    """What `host` (not the one whose link went down) saw during `down`: TCP trouble, stopped traffic."""
    slack = threshold_int("link_stalls.slack_ns")
    lo, hi = down.start_ns - slack, (down.end_ns if down.end_ns >= 0 else down.start_ns) + slack
    seen = PeerSaw(host=host)
    tcp = _series(analysis, host, "")
    during = tcp[(tcp["t1_ns"] > lo) & (tcp["t0_ns"] < hi)] if not tcp.empty else tcp
    if total(during, "tcp:RetransSegs") > 0:
        seen["tcp_retransmits"] = int(total(during, "tcp:RetransSegs"))
    if total(during, "tcp:TCPTimeouts") > 0:
        seen["tcp_timeouts"] = int(total(during, "tcp:TCPTimeouts"))
    window = _job_window(analysis)
    for iface in judged.get(host, {}):
        s = _series(analysis, host, iface)
        if s.empty or "tx_mbps" not in s:
            continue
        rate = s["tx_mbps"].fillna(0) + s["rx_mbps"].fillna(0)
        inside = (s["t1_ns"] > down.start_ns) & (s["t0_ns"] < max(down.end_ns, down.start_ns))
        busy = s if window is None else s[(s["t0_ns"] >= window[0]) & (s["t1_ns"] <= window[1])]
        typical = float((busy["tx_mbps"].fillna(0) + busy["rx_mbps"].fillna(0)).median()) if len(busy) else 0.0
        if inside.any() and typical > 0 and float(rate[inside].max()) < threshold("links.stopped_share") * typical:
            seen.setdefault("traffic_stopped_on", []).append(iface)
            seen["typical_mbps"] = round(typical, 3)
    return seen if len(seen) > 1 else None


def _describe_seen(seen: PeerSaw) -> str:
    parts = []
    if seen.get("traffic_stopped_on"):
        parts.append(f"its traffic on {', '.join(seen['traffic_stopped_on'])} stopped")
    if seen.get("tcp_timeouts"):
        parts.append(f"{seen['tcp_timeouts']} TCP retransmission timeout(s)")
    if seen.get("tcp_retransmits"):
        parts.append(f"{seen['tcp_retransmits']} TCP retransmission(s)")
    return f"{seen['host']}: " + ", ".join(parts)


def _down_text(d: Down) -> str:
    if d.end_ns < 0:
        return f"went down at {clock_utc(d.start_ns)} and was still down at the last sample"
    if d.samples_down == 0:
        return (f"lost its carrier and got it back between {clock_utc(d.earliest_start_ns)} and "
                f"{clock_utc(d.latest_end_ns)} (shorter than the sampling interval)")
    return f"went down for {d.seconds:.1f} s at {clock_utc(d.start_ns)}"


def _stall_text(stall: Stall | None) -> str:
    if stall is None:
        return "the job's steps show no stall then"
    who = "every rank" if stall.everyone else f"{len(stall.ranks)} of {stall.world} ranks"
    where = f" {stall.where()}" if stall.where() else ""
    return f"{who} stalled {stall.stall_s:.1f} s{where} at step {stall.step}"


def _down_evidence(d: Down, stall: Stall | None) -> LinkDown:
    ev = LinkDown(start_ns=d.start_ns, end_ns=d.end_ns, seconds=round(d.seconds, 3) if d.end_ns >= 0 else None,
                  start_between_ns=[d.earliest_start_ns, d.latest_start_ns],
                  end_between_ns=[d.earliest_end_ns, d.latest_end_ns], samples_down=d.samples_down,
                  taken_down=d.admin_down, carrier_changes=d.carrier_changes)
    if stall is not None:
        ev["stall"] = {"step": stall.step, "seconds": round(stall.stall_s, 3), "ranks": list(stall.ranks),
                       "world": stall.world, "collective": stall.collective, "phase": stall.phase,
                       "typical_step_s": round(stall.typical_step_s, 4)}
    return ev


def _consequence(down: Down, others: list[Down]) -> bool:
    """A carrier loss (not taken down) overlapping a link another host took down: a consequence of that."""
    if down.admin_down:
        return False
    end = down.end_ns if down.end_ns >= 0 else 1 << 62
    return any(o.admin_down and o.host != down.host and o.start_ns <= end + threshold_int("link_stalls.slack_ns")
               and (o.end_ns if o.end_ns >= 0 else 1 << 62) + threshold_int("link_stalls.slack_ns") >= down.start_ns for o in others)


def _flaps(analysis: Analysis, judged: dict[str, dict[str, str]]) -> list[Finding]:
    downs = [d for d in analysis.view(link_downs_view) if d.iface in judged.get(d.host, {})]
    own = [d for d in downs if not _consequence(d, downs)]
    echoes = [d for d in downs if d not in own]
    steps = analysis.view(job_steps_view)
    n_steps = max(1, int(steps["step"].nunique())) if not steps.empty else 1
    findings = []
    for (host, iface) in sorted({(d.host, d.iface) for d in own}):
        mine = sorted((d for d in own if (d.host, d.iface) == (host, iface)), key=lambda d: d.start_ns)
        stalls = [stall_during(analysis, d.start_ns, d.end_ns) for d in mine]
        worst = max(range(len(mine)), key=lambda i: (getattr(stalls[i], "stall_s", -1.0), mine[i].seconds))
        lead, lead_stall = mine[worst], stalls[worst]
        also: list[PeerSaw] = []
        for d in mine:
            for other in sorted(judged):
                if other != host:
                    seen = _what_peer_saw(analysis, other, d, judged)
                    if seen and all(s["host"] != other for s in also):
                        also.append(seen)
        for e in echoes:
            if any(abs(e.start_ns - d.start_ns) <= 2 * threshold_int("link_stalls.slack_ns") for d in mine):
                also.append({"host": e.host, "carrier_lost_on": e.iface})
        felt = [s for s in stalls if s is not None]
        stalled_s = sum(s.stall_s for s in felt)
        typical = felt[0].typical_step_s if felt else 0.0
        severity = Severity.CRITICAL if felt or lead.end_ns < 0 else Severity.WARNING
        more = f" (and {len(mine) - 1} more time(s))" if len(mine) > 1 else ""
        title = (f"{host}'s link {iface} {_down_text(lead)}{more}; {_stall_text(lead_stall)}")
        seen_text = "; ".join(_describe_seen(s) for s in also if "carrier_lost_on" not in s)
        advice = (f"The link of {host} itself went down ({'taken down' if lead.admin_down else 'carrier lost'}): "
                  "check its cable / transceiver and switch port (`ip -s link`, `ethtool <iface>`, the switch's "
                  "port log, `dmesg` for link up/down lines). The other hosts only saw the loss"
                  + (f" ({seen_text})" if seen_text else "") + ".")
        why = judged[host].get(iface, "")
        findings.append(Finding(
            analyzer="links", severity=severity, title=title, recommendation=advice,
            evidence=LinksEvidence(host=host, iface=iface, check="flap", used_because=why,
                                   downs=[_down_evidence(d, s) for d, s in zip(mine, stalls)],
                                   stalled_seconds=round(stalled_s, 3), also_saw=also,
                                   window={"start_ns": lead.earliest_start_ns,
                                           "end_ns": max(lead.latest_end_ns, lead.latest_start_ns)}),
            ranks=tuple(sorted({r for s in felt for r in s.ranks})), hosts=(host,),
            cost=Cost(stalled_s / n_steps, stalled_s / n_steps / (typical + stalled_s / n_steps) if felt else 0.0),
            key=f"links:flap:{host}:{iface}"))
    return findings


def _rate(rows: pd.DataFrame, names: tuple[str, ...]) -> dict[str, float]:
    span = float(rows["dt_s"].sum()) if len(rows) else 0.0
    return {n: total(rows, n) / span for n in names if span > 0 and total(rows, n) > 0}


def _errors(analysis: Analysis, judged: dict[str, dict[str, str]]) -> Iterator[Finding]:
    for host, ifaces in sorted(judged.items()):
        for iface in sorted(ifaces):
            s = _series(analysis, host, iface)
            if s.empty:
                continue
            errors = {n: v for n, v in _rate(s, ERROR_NAMES).items() if v >= threshold("links.errors_per_s")}
            packets = _rate(s, ("rx_packets", "tx_packets"))
            drops = {}
            for name, per_s in _rate(s, DROP_NAMES).items():
                side = "tx_packets" if name.startswith(("tx", "qdisc")) else "rx_packets"
                share = per_s / packets[side] if packets.get(side) else 1.0
                if per_s >= threshold("links.drops_per_s") and share >= threshold("links.drop_share"):
                    drops[name] = (per_s, share)
            if not errors and not drops:
                continue
            parts = [f"{n} {v:.2f}/s" for n, v in errors.items()] + [
                f"{n} {v:.1f}/s ({100 * sh:.2f}% of packets)" for n, (v, sh) in drops.items()]
            yield Finding(
                Kind.LINKS, Severity.WARNING, f"{host}'s link {iface} loses packets: " + ", ".join(parts),
                recommendation=("Errors (CRC, frame, carrier) mean a bad cable, transceiver or port: check "
                                "`ethtool -S` and the switch port, and replace the part. Drops mean full queues: "
                                "a receiver that cannot keep up (ring size, `ethtool -g`), or a qdisc / shaper "
                                "dropping what it cannot send."),
                evidence=LinksEvidence(
                    host=host, iface=iface, check="errors", errors_per_s={n: round(v, 4) for n, v in errors.items()},
                    drops={n: {"per_s": round(v, 3), "share": round(sh, 5)} for n, (v, sh) in drops.items()},
                    thresholds={"errors_per_s": threshold("links.errors_per_s"),
                                "drops_per_s": threshold("links.drops_per_s"), "drop_share": threshold("links.drop_share")},
                    window={"start_ns": int(s["t0_ns"].min()), "end_ns": int(s["t1_ns"].max())}),
                hosts=(host,), key=f"links:errors:{host}:{iface}")


def _last(s: pd.DataFrame, column: str) -> float:
    """The last value of `column` that was sampled; NaN without one."""
    return float(s[column].dropna().iloc[-1]) if column in s and s[column].notna().any() else float("nan")


def _link_stats(analysis: Analysis, judged: dict[str, dict[str, str]]) -> list[LinkMeasures]:
    out: list[LinkMeasures] = []
    window = _job_window(analysis)
    for host, ifaces in sorted(judged.items()):
        for iface in sorted(ifaces):
            s = _series(analysis, host, iface)
            inside = s if window is None or s.empty else s[(s["t1_ns"] > window[0]) & (s["t0_ns"] < window[1])]
            s = inside if len(inside) else s  # the samples inside the job, where there are any
            if s.empty:
                continue
            peak = float(np.nanmax(np.maximum(s["tx_mbps"].fillna(0), s["rx_mbps"].fillna(0)))) if "tx_mbps" in s else 0.0
            speed, shaper = _last(s, "speed_mbps"), _last(s, "qdisc_rate_bps") / 1e6
            held = _rate(s, ("qdisc_overlimits", "qdisc_drops"))
            out.append({"host": host, "iface": iface, "why": ifaces[iface], "peak_mbps": peak,
                        "tx_peak_mbps": float(s["tx_mbps"].max()) if "tx_mbps" in s else 0.0,
                        "speed_mbps": speed, "shaper_mbps": shaper,
                        "overlimits_per_s": held.get("qdisc_overlimits", 0.0),
                        "qdisc_drops_per_s": held.get("qdisc_drops", 0.0),
                        "window": {"start_ns": int(s["t0_ns"].min()), "end_ns": int(s["t1_ns"].max())}})
    return out


def _rates(analysis: Analysis, stats: list[LinkMeasures]) -> Iterator[Finding]:
    comm = analysis.view(comm_share_view)
    for st in stats:
        others = [o for o in stats if o["host"] != st["host"]]
        best_speed = max((o["speed_mbps"] for o in others if o["speed_mbps"] == o["speed_mbps"]), default=float("nan"))
        others_peak = max((o["tx_peak_mbps"] for o in others), default=float("nan"))
        shaped = st["overlimits_per_s"] >= threshold("links.overlimits_per_s") or st["qdisc_drops_per_s"] >= threshold("links.overlimits_per_s")
        slower = st["speed_mbps"] == st["speed_mbps"] and best_speed == best_speed and st["speed_mbps"] < best_speed
        saturated = slower and st["peak_mbps"] >= threshold("links.saturated_share") * st["speed_mbps"]
        comm_bound = comm is not None and comm.share >= threshold("links.comm_bound_share")
        if not (shaped or (saturated and comm_bound)):
            continue
        limit = st["shaper_mbps"] if shaped and st["shaper_mbps"] == st["shaper_mbps"] else st["speed_mbps"]
        held_by = (f"held to {limit:g} Mbit/s by its egress shaper ({st['overlimits_per_s']:.0f} packets held back "
                   f"per second)" if shaped else
                   f"trained at {st['speed_mbps']:g} Mbit/s where the other nodes' run at {best_speed:g}")
        peers = f"; the other nodes send up to {others_peak:.1f} Mbit/s" if others_peak == others_peak else ""
        waits = (f"; the job spends {100 * comm.share:.0f}% of each step in {comm.collective}"
                 if comm is not None else "")
        yield Finding(
            analyzer="links", severity=Severity.WARNING,
            title=(f"{st['host']}'s link {st['iface']} is {held_by}; it sends {st['tx_peak_mbps']:.1f} Mbit/s at "
                   f"most{peers}{waits}"),
            recommendation=(f"Every collective of the job waits for {st['host']}'s slow link. Check the shaping "
                            f"on it (`tc -s qdisc show dev {st['iface']}`: tbf / htb / a cloud bandwidth policy), "
                            "its negotiated speed (`ethtool`), and the switch port; move the job off this node "
                            "until it is fixed."),
            evidence=LinksEvidence(
                host=st["host"], iface=st["iface"], check="rate", used_because=st["why"],
                shaper_mbps=finite(st["shaper_mbps"]), speed_mbps=finite(st["speed_mbps"]),
                others_speed_mbps=finite(best_speed), tx_peak_mbps=round(st["tx_peak_mbps"], 3),
                others_tx_peak_mbps=None if others_peak != others_peak else round(others_peak, 3),
                overlimits_per_s=round(st["overlimits_per_s"], 2), qdisc_drops_per_s=round(st["qdisc_drops_per_s"], 2),
                comm_share=None if comm is None else round(comm.share, 3),
                collective=None if comm is None else comm.collective,
                cost_is="the job's time per step inside collectives: an upper bound of what the link costs",
                window=st["window"]),
            hosts=(st["host"],),
            cost=Cost(comm.seconds_per_step, comm.share) if comm is not None else Cost(),
            key=f"links:rate:{st['host']}:{st['iface']}")


def _summary(stats: list[LinkMeasures]) -> Finding:
    parts = [f"{s['host']} {s['iface']}" + (f" ({s['why']})" if s["why"] else "") + f" peak {s['peak_mbps']:.1f} Mbit/s"
             for s in stats[:8]]
    return Finding(
        Kind.LINKS, Severity.INFO, f"Ethernet links of {len({s['host'] for s in stats})} host(s): " + "; ".join(parts)
              + (f"; and {len(stats) - 8} more" if len(stats) > 8 else ""),
        recommendation="Context: the interfaces the job used on each host, why, and their busiest sample interval.",
        evidence=LinksEvidence(links=[_measured(s) for s in stats[:256]]),
        hosts=tuple(sorted({s["host"] for s in stats})), key="links:summary")


def _measured(s: LinkMeasures) -> LinkStat:
    """A link's stats as evidence: a rate not measured (NaN) None."""
    return cast(LinkStat, {k: finite(v) if k.endswith("_mbps") else v for k, v in s.items()})


def analyze_links(analysis: Analysis) -> list[Finding]:
    if analysis.store["netdev"].empty:
        return []
    # {host: {iface: why}}: the job's interfaces, or the physical-looking ones where those are unknown
    judged = {host: {i: w for i, w in ifaces.items() if w} or {i: "" for i in ifaces if not i.startswith(VIRTUAL)}
              for host, ifaces in analysis.view(job_ifaces_view).items()}
    stats = _link_stats(analysis, judged)
    findings = [*_flaps(analysis, judged), *_errors(analysis, judged), *_rates(analysis, stats)]
    if stats:
        findings.append(_summary(stats))
    return findings
