"""NCCL RAS's dead and missing processes joined with the wait-for graph's roots (`join_roots`): one cause, one
finding."""

from __future__ import annotations

from dataclasses import replace

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.crash import host_map
from perftracker.analyzers.failures.waitview import graph_of
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import context_view
from perftracker.analyzers.nccl.merge import problems
from perftracker.store import Store

RAS_FLAGS = ("ras_dead", "ras_missing")
_PID_TABLES = ("stacks", "nccl", "ranks", "failures", "collectives_fr")


def _pids(store: Store) -> dict[int, set[int]]:
    """rank -> the pids any table gives it."""
    out: dict[int, set[int]] = {}
    for name in _PID_TABLES:
        frame = store[name]
        if frame.empty or "pid" not in frame or "rank" not in frame:
            continue
        for rank, pid in zip(frame["rank"], frame["pid"]):
            if int(rank) >= 0 and int(pid) > 0:
                out.setdefault(int(rank), set()).add(int(pid))
    return out


def _root_ranks(analysis: Analysis, host: str, pid: int, roots: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The root whose ranks are that process (pid first, else a host holding only root ranks); () when none."""
    pids, hosts = _pids(analysis.store), host_map(analysis.store)
    for ranks in roots:
        if pid > 0 and any(pid in pids.get(r, ()) for r in ranks):
            return ranks
    for ranks in roots:
        on_host = {r for r, h in hosts.items() if h == host}
        if host and on_host and on_host <= set(ranks):
            return ranks
    return ()


def join_roots(analysis: Analysis, findings: list[Finding]) -> list[Finding]:
    """See docs/internals/analyzers.md."""
    ras = [f for f in findings if {str(p.get("flag")) for p in problems(f)} & set(RAS_FLAGS)]
    if not ras:
        return findings
    graph = analysis.view(graph_of)
    roots = [r.ranks for r in graph.roots if r.ranks]
    if not roots:
        return findings
    records = [r for r in analysis.view(context_view).ras if r.kind in ("dead", "missing_process", "missing_rank")]
    out: list[Finding] = []
    for f in findings:
        if not any(f is g for g in ras):
            out.append(f)
            continue
        joined = sorted({rank for r in records if r.host in f.hosts or not f.hosts
                         for rank in _root_ranks(analysis, r.host, r.pid, roots)})
        if not joined:
            out.append(f)
            continue
        out.append(replace(
            f, severity=Severity.INFO, ranks=tuple(joined),
            title=f"{f.title}: the same process as the hang's root, rank(s) {', '.join(map(str, joined[:8]))} "
                  "(the flight-recorder finding names the cause)",
            evidence={**f.evidence, "wait_for_root_ranks": joined, "joined_with": "crash: root of the wait-for graph"}))
    return out
