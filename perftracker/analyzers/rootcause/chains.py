"""Join stragglers with host evidence into ranked root-cause chains.

`link_findings(analysis, findings)`: the same findings (same order, same ids), each straggler given its
root-cause chain.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Kind, Severity
from perftracker.analyzers.health.gpu_health import THROTTLE
from perftracker.analyzers.health.topology import rank_map_view
from perftracker.analyzers.rootcause.causality import Relation, relation, straggler_locus, straggler_window
from perftracker.evidence import as_evidence
from perftracker.evidence.common import Location, RootCause
from perftracker.evidence.network import GpuHealthEvidence, GpuLinksEvidence, RdmaEvidence, RdmaPfcEvidence
from perftracker.evidence.steps import StepsEvidence, StragglerEvidence

_NIC_ANALYZERS = (Kind.RDMA, Kind.RDMA_PFC)  # port counters (sysfs) and RoCE flow control (ethtool)
_GPU_ANALYZERS = (Kind.GPU_HEALTH, Kind.GPU_LINKS)
_GPU_PHASES = ("forward", "backward", "optimizer")


def straggler_kind(f: Finding) -> str:
    """'compute' / 'communication' for a finding that names one slow rank (a straggler's own kind; a slow GPU
    phase of `steps` or a `stack_profile` rank: compute), '' for any other finding."""
    if len(f.ranks) != 1 or f.severity < Severity.WARNING:
        return ""
    if f.analyzer == Kind.STRAGGLER:
        return str(as_evidence(f.evidence, StragglerEvidence).get("kind", ""))
    # a sampled-stack rank: its own work takes the time, so the rank's device is the first suspect
    gpu_phase = f.analyzer == Kind.STEPS and as_evidence(f.evidence, StepsEvidence).get("phase", "") in _GPU_PHASES
    return "compute" if gpu_phase or f.analyzer == Kind.STACK_PROFILE else ""


def _location(rmap: pd.DataFrame, straggler: Finding) -> Location:
    rank = straggler.ranks[0]
    hit = rmap[rmap["rank"] == rank] if not rmap.empty else rmap
    if len(hit):
        r = hit.iloc[0]
        return {"rank": rank, "host": str(r["host"]), "gpu": int(r["gpu"]), "nics": list(r["nics"]),
                "pci_bus_id": str(r["pci_bus_id"]), "numa_node": int(r["numa_node"]),
                "sources": {"host": r["host_source"], "gpu": r["gpu_source"], "nics": r["nic_source"]}}
    return {"rank": rank, "host": straggler.hosts[0] if straggler.hosts else "", "gpu": -1, "nics": [],
            "pci_bus_id": "", "numa_node": -1, "sources": {}}


def _matches(loc: Location, f: Finding) -> str:
    """'gpu' / 'nic' when `f` (a `_GPU_ANALYZERS` or `_NIC_ANALYZERS` finding) is about the straggler's GPU / one of
    its NICs, else ''."""
    if not loc["host"] or f.severity < Severity.WARNING:
        return ""
    if f.analyzer in _GPU_ANALYZERS:
        gpu = as_evidence(f.evidence, GpuLinksEvidence if f.analyzer == Kind.GPU_LINKS else GpuHealthEvidence)
        return "gpu" if gpu.get("host") == loc["host"] and loc["gpu"] >= 0 and gpu.get("gpu") == loc["gpu"] else ""
    nic = as_evidence(f.evidence, RdmaPfcEvidence if f.analyzer == Kind.RDMA_PFC else RdmaEvidence)
    on = f.analyzer in _NIC_ANALYZERS and nic.get("host") == loc["host"] and "device" in nic
    return "nic" if on and (not loc["nics"] or f"{nic['device']}/{nic['port']}" in loc["nics"]) else ""


def _time_share(f: Finding) -> float:
    """The share of the time a GPU's slowdown or a priority's pause lasted (0 for other findings)."""
    if f.analyzer not in (Kind.GPU_HEALTH, Kind.RDMA_PFC):
        return 0.0
    ev = as_evidence(f.evidence, GpuHealthEvidence if f.analyzer == Kind.GPU_HEALTH else RdmaPfcEvidence)
    return float(ev.get("share_of_time", 0) or 0)


def _cause_text(f: Finding) -> str:
    ev = as_evidence(f.evidence, GpuHealthEvidence) if f.analyzer == Kind.GPU_HEALTH else GpuHealthEvidence()
    if str(ev.get("check", "")).startswith(THROTTLE):
        clock, median = ev.get("sm_clock_mhz_throttled"), ev.get("job_median_sm_clock_mhz")
        return (f"its GPU {ev['gpu']} on host {ev['host']} was in {str(ev['reason']).replace('_', ' ')} slowdown "
                f"{100 * float(ev['share_of_time']):.0f}% of the time"
                + (f"; SM clock {float(clock):.0f} MHz while throttled against a job median of "
                   f"{float(median):.0f}" if clock and median else ""))
    if not f.title:
        return f.id
    return f.title if f.title.split(" ", 1)[0].isupper() else f.title[0].lower() + f.title[1:]  # "GPU 3 ..." stays


_LOCUS_TEXT = {"cpu": "its extra time is CPU-side work", "gpu": "its extra time is in GPU kernels",
               "network": "its extra time is in its transfers", "": "nothing shows where its extra time goes"}


def _summary(straggler: Finding, loc: Location, chain: list[tuple[Finding, Relation]], has_samples: bool,
             locus: str) -> str:
    ev = as_evidence(straggler.evidence, StragglerEvidence) if straggler.analyzer == Kind.STRAGGLER \
        else StragglerEvidence()
    share = ev.get("steps_mostly_last", ev.get("share_last"))
    head = f"rank {loc['rank']} late in {100 * float(share):.0f}% of steps" if share is not None \
        else straggler.title[0].lower() + straggler.title[1:]
    causes = [f for f, rel in chain if rel.explains]
    if causes:
        return "; ".join([head] + [_cause_text(f) for f in causes[:3]])
    others = [f for f, _ in chain]
    if others:
        first, rel = chain[0]
        return (f"{head}; {_LOCUS_TEXT[locus]}; {rel.kind}: {_cause_text(first)} ({rel.why})"
                + (f" and {len(others) - 1} more" if len(others) > 1 else ""))
    if has_samples:
        where = f"GPU {loc['gpu']}" if loc["gpu"] >= 0 else "its GPU"
        return (f"{head}; no host evidence against {where} on host {loc['host'] or '?'} or its NICs in the "
                "counter samples: look at the work on the rank itself (data loading, CPU contention, uneven input)")
    return f"{head}; no GPU / NIC samples for its host: collect counters to see why"


def _corroborate(findings: list[Finding]) -> list[Finding]:
    """A sampled-stack straggler and a trace / step / hang finding about the same one rank name each other."""
    sampled = [f for f in findings if f.analyzer == Kind.STACK_PROFILE and len(f.ranks) == 1]
    others = [f for f in findings if f.analyzer in (Kind.STRAGGLER, Kind.STEPS, Kind.HANG) and len(f.ranks) == 1
              and f.severity >= Severity.WARNING]
    links: dict[str, set[str]] = {}
    for s in sampled:
        for o in others:
            if o.ranks == s.ranks:
                links.setdefault(s.id, set()).add(o.id)
                links.setdefault(o.id, set()).add(s.id)
    return [f.with_related(sorted(links[f.id])) if f.id in links else f for f in findings]


def link_findings(analysis: Analysis, findings: list[Finding]) -> list[Finding]:
    """Attach host evidence to stragglers, link both ways, and give explaining findings a cost."""
    with analysis.active():  # the run's thresholds
        store = analysis.store
        findings = _corroborate(findings)
        stragglers = [f for f in findings if straggler_kind(f)]
        health = [f for f in findings if f.analyzer in _GPU_ANALYZERS + _NIC_ANALYZERS]
        if not stragglers and not health:
            return findings
        rmap = analysis.view(rank_map_view) if stragglers else pd.DataFrame()
        has_samples = not store["counters"].empty
        updated: dict[str, Finding] = {}

        def current(f: Finding) -> Finding:
            return updated.get(f.id, f)

        for s in stragglers:
            loc = _location(rmap, s)
            locus, window = straggler_locus(analysis, s), straggler_window(analysis, s)
            related = [(f, relation(f, locus, window)) for f in health if _matches(loc, f)]
            chain = sorted(related, key=lambda fr: (not fr[1].explains, fr[1].kind != "possible cause",
                                                    -int(fr[0].severity), -_time_share(fr[0])))
            root = RootCause(summary=_summary(s, loc, chain, has_samples, locus), location=loc,
                             locus=locus or "unknown", window_ns=list(window) if window else None,
                             chain=[{"id": f.id, "analyzer": f.analyzer, "severity": f.severity.label,
                                     "title": f.title, "explains": rel.explains, "relation": rel.kind,
                                     "why": rel.why} for f, rel in chain])
            new = replace(current(s), evidence={**current(s).evidence, "root_cause": root})
            causes = [f for f, rel in chain if rel.explains]
            if causes:
                lead = causes[0]
                new = replace(new, recommendation=f"Likely cause: {_cause_text(lead)}. {lead.recommendation} "
                              f"{s.recommendation}")
            updated[s.id] = new.with_related(f.id for f, _ in chain)
            for f, rel in chain:
                cur = current(f).with_related([s.id])
                if rel.explains:
                    if cur.cost.seconds_per_step < s.cost.seconds_per_step:
                        cur = replace(cur, cost=Cost(s.cost.seconds_per_step, s.cost.share_of_step))
                    if s.ranks[0] not in cur.ranks:
                        cur = replace(cur, ranks=tuple(sorted(set(cur.ranks) | set(s.ranks))))
                updated[f.id] = cur
        slow = [f for f in findings if f.analyzer == Kind.BANDWIDTH and f.severity >= Severity.WARNING]
        nic_findings = [f for f in health if f.analyzer in _NIC_ANALYZERS and f.severity >= Severity.WARNING]
        for b in slow:
            if nic_findings:
                updated[b.id] = current(b).with_related(f.id for f in nic_findings)
                for f in nic_findings:
                    updated[f.id] = current(f).with_related([b.id])
        return [updated.get(f.id, f) for f in findings]
