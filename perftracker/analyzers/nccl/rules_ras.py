"""NCCL rule on what the RAS client reported (`ras_status`): dead processes, ranks missing from communicators,
communicator errors."""

from __future__ import annotations

from collections.abc import Iterator

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, finding


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
