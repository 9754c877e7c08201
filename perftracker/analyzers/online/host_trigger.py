"""The watcher's host-signal trigger: the offline host-health rules on the samplers' latest records.

`host_alarm(store)` runs the host-counter analyzers on the latest records: one `Alarm` (kind "host") or None.
"""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.gpu_health import analyze_gpu_health
from perftracker.analyzers.health.gpu_links import analyze_gpu_links
from perftracker.analyzers.health.links import analyze_links
from perftracker.analyzers.health.rdma import analyze_rdma
from perftracker.analyzers.health.rdma_pfc import analyze_rdma_pfc
from perftracker.analyzers.thresholds import current
from perftracker.store import Store
from perftracker.store.alarms import Alarm

RULES = (analyze_gpu_health, analyze_gpu_links, analyze_rdma, analyze_rdma_pfc, analyze_links)


def host_alarm(store: Store) -> Alarm | None:
    analysis = Analysis(store, AnalysisOptions(thresholds=current().overrides))  # the watch's thresholds
    loud: list[Finding] = []
    for rule in RULES:
        try:
            found = rule(analysis)
        except Exception:  # noqa: BLE001  one rule failing on a partial window must not silence the others
            continue
        loud.extend(f for f in found if f.severity in (Severity.WARNING, Severity.CRITICAL))
    if not loud:
        return None
    ranks = tuple(sorted({int(r) for f in loud for r in f.ranks}))
    hosts = tuple(sorted({str(h) for f in loud for h in f.hosts}))
    return Alarm("host", loud[0].title, ranks=ranks, hosts=hosts, details=tuple(f.title for f in loud))
