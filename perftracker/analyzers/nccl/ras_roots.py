"""The NCCL rule on what the RAS client reported (`ras_status`: dead processes, ranks missing from communicators,
communicator errors), and its dead and missing processes joined with the wait-for graph's roots (`join_roots`): one
cause, one finding."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.crash import host_map
from perftracker.analyzers.failures.waitview import graph_of
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, context_view, finding
from perftracker.analyzers.nccl.merge import problems
from perftracker.evidence import as_evidence
from perftracker.evidence.network import NcclConfigEvidence
from perftracker.store import Store

RAS_FLAGS = ("ras_dead", "ras_missing")
_PID_TABLES = ("stacks", "nccl", "ranks", "failures", "collectives_fr")


def ras_status(ctx: NcclContext) -> Iterator[Finding]:
    """See docs/internals/analyzers.md."""
    records = ctx.ras
    dead = [r for r in records if r.kind == "dead"]
    missing = [r for r in records if r.kind in ("missing_rank", "missing_process")]
    if dead:
        names = sorted({r.process() for r in dead})
        yield finding(
            "ras_dead", Severity.CRITICAL, f"NCCL RAS: {len(names)} job process(es) dead (unreachable for 60 s): "
            f"{', '.join(names[:4])}", "Look at that process's node first (dmesg, Xid errors, OOM kills, the "
            "launcher's exit codes): the other ranks wait for it in their collectives and will time out.",
            {"dead": names[:16], "missing_ranks": sorted({f"{r.comm} rank {r.rank}" for r in missing if r.comm})[:16],
             "log": [r.where for r in dead[:4]]}, hosts=[r.host for r in dead])
    elif missing:
        names = sorted({r.process() for r in missing})
        yield finding(
            "ras_missing", Severity.WARNING, f"NCCL RAS: {len(names)} rank(s) or process(es) gave no communicator "
            f"data: {', '.join(names[:4])}", "An unresponsive process (stopped, hung in the host code, or gone): "
            "take its stacks (py-spy dump) and query RAS again; after 60 s RAS declares it dead.",
            {"missing": names[:16], "log": [r.where for r in missing[:4]]}, hosts=[r.host for r in missing])
    errors = [r for r in records if r.kind == "comm_error"]
    if errors:
        comms = sorted({r.comm for r in errors})
        yield finding(
            "ras_comm_error", Severity.CRITICAL, f"NCCL RAS: communicator(s) {', '.join(comms[:4])} report errors",
            "The communicator failed (initialization or an asynchronous error): the NCCL WARN lines of its ranks say "
            "why.", {"errors": [f"{r.comm} {r.process()} {r.detail}".strip() for r in errors[:16]],
                     "log": [r.where for r in errors[:4]]}, hosts=[r.host for r in errors])
    mismatch = [r for r in records if r.kind == "comm_mismatch"]
    if mismatch:
        yield finding(
            "ras_mismatch", Severity.INFO, f"NCCL RAS: ranks of {len({r.comm for r in mismatch})} communicator(s) are "
            "at different collective counts or status", "Normal while collectives run; query RAS again: counts that "
            "do not move mean the communicator is stuck.",
            {"mismatch": [f"{r.comm}: {r.detail}" for r in mismatch[:8]], "log": [r.where for r in mismatch[:4]]})


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
        joined = sorted({rank for r in records if r.host in f.hosts or not f.hosts
                         for rank in _root_ranks(analysis, r.host, r.pid, roots)}) if any(f is g for g in ras) else []
        if not joined:  # not a RAS finding, or not about a root's process
            out.append(f)
            continue
        out.append(replace(
            f, severity=Severity.INFO, ranks=tuple(joined),
            title=f"{f.title}: the same process as the hang's root, rank(s) {', '.join(map(str, joined[:8]))} "
                  "(the flight-recorder finding names the cause)",
            evidence=NcclConfigEvidence(**as_evidence(f.evidence, NcclConfigEvidence), wait_for_root_ranks=joined,
                                        joined_with="crash: root of the wait-for graph")))
    return out
