"""Why a node or a link measured low, from the facts the node itself recorded (`cpu_cause`, `link_cause`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from perftracker.analyzers.nccl.expected_bw import link_gbs
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.traces import SanityEvidence


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def cpu_cause(records: Sequence[Mapping[str, Any]], peers: Sequence[Mapping[str, Any]]) -> tuple[str, SanityEvidence]:
    """See docs/internals/analyzers.md: `records` are the node's ranks' records, `peers` the other nodes'."""
    facts = [r.get("cpu") or {} for r in records]
    quotas = [q for q in (_num(f.get("quota_cores")) for f in facts) if q is not None]
    peer_quotas = [_num((p.get("cpu") or {}).get("quota_cores")) for p in peers]
    throttled = [t for t in (_num(f.get("throttled_share")) for f in facts) if t is not None]
    clauses = []
    evidence = SanityEvidence()
    if quotas:
        quota = min(quotas)
        looser = [q for q in peer_quotas if q is None or q > 1.5 * quota]
        if len(looser) * 2 > len(peer_quotas) or not peer_quotas:  # its peers have none, or a larger one
            where = next((str(f.get("quota_at", "")) for f in facts if _num(f.get("quota_cores")) == quota), "")
            clause = f"a CPU quota of {quota:.2g} CPU is set on its cgroup{' ' + where if where else ''}"
            if throttled and max(throttled) > 0:
                clause += f", throttled {max(throttled):.0%} of periods during the check"
            clauses.append(clause)
            evidence.update({"cpu_quota_cores": quota, "cpu_quota_cgroup": where,
                             "peer_cpu_quotas": peer_quotas, "throttled_share": max(throttled) if throttled else None})
    if not clauses and throttled and max(throttled) >= threshold('sanity.throttled_share'):
        clauses.append(f"its cgroup was throttled {max(throttled):.0%} of periods during the check")
        evidence["throttled_share"] = max(throttled)
    psi = [p for p in (_num(f.get("cgroup_psi_some_avg10")) for f in facts) if p is not None]
    peer_psi = [p for p in (_num((q.get("cpu") or {}).get("cgroup_psi_some_avg10")) for q in peers) if p is not None]
    if psi and peer_psi and max(psi) - statistics.median(peer_psi) >= threshold('sanity.psi_gap'):
        clauses.append(f"its cgroup's CPU pressure is {max(psi):.0f}% (PSI some avg10; peers "
                       f"{statistics.median(peer_psi):.0f}%)")
        evidence.update({"cgroup_cpu_pressure": max(psi), "peer_cgroup_cpu_pressure": statistics.median(peer_psi)})
    machine = [p for p in (_num(f.get("psi_some_avg10")) for f in facts) if p is not None]
    if machine:
        evidence["machine_cpu_pressure"] = max(machine)
    return "; ".join(clauses), evidence


def _shapers(facts: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(str(n.get("name", "")), q) for n in facts.get("nics", []) if n.get("operstate") == "up"
            for q in n.get("qdiscs", []) or [] if q.get("rate_mbit") is not None or q.get("delay_ms") is not None]


def link_cause(host: str, nodes: Mapping[str, Mapping[str, Any]]) -> tuple[str, SanityEvidence]:
    """See docs/internals/analyzers.md."""
    facts = nodes.get(host, {})
    shaped = _shapers(facts)
    peers_shaped = any(_shapers(f) for h, f in nodes.items() if h != host)
    if shaped and not peers_shaped:
        name, q = shaped[0]
        parts = [f"held to {q['rate_mbit']:g} Mbit/s" if q.get("rate_mbit") is not None else "",
                 f"delayed {q['delay_ms']:g} ms" if q.get("delay_ms") is not None else ""]
        return (f"its {name} egress is shaped by tc {q.get('kind', '')}: {' and '.join(p for p in parts if p)}",
                SanityEvidence(shaping={"iface": name, **dict(q)}))
    nics = [n for n in facts.get("nics", []) if n.get("operstate") == "up"]
    rates = {h: max((n.get("speed_mbps", -1) for n in f.get("nics", []) if n.get("operstate") == "up"), default=-1)
             for h, f in nodes.items()}
    mine = rates.get(host, -1)
    others = sorted(r for h, r in rates.items() if h != host and r > 0)
    if mine > 0 and others and mine < (peer := others[len(others) // 2]):  # GB/s one way: the link table's
        return (f"its NIC negotiated {mine} Mb/s where its peers have {peer} Mb/s",
                SanityEvidence(nic_rate_mbps=mine, peer_rate_mbps=peer, nic_link_gbs=link_gbs("net", gbps=mine / 1000),
                               peer_link_gbs=link_gbs("net", gbps=peer / 1000)))
    errors = {n["name"]: n.get("errors", {}) for n in nics if any(v > 0 for v in n.get("errors", {}).values())}
    peers_count = any(any(v > 0 for n in f.get("nics", []) for v in n.get("errors", {}).values())
                      for h, f in nodes.items() if h != host)
    if errors and not peers_count:  # counters since boot: telling only where the peers count none
        return "its link counts errors or drops", SanityEvidence(link_errors=errors)
    return "its link or NIC is slower than its peers' (shaped, congested or degraded)", SanityEvidence()
