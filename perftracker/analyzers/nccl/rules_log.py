"""NCCL rules read from the log alone: WARN lines, IB completion errors per link, slow init."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, finding
from perftracker.analyzers.thresholds import threshold

_STATUS_HINT = {
    12: "RETRY_EXC_ERR: the peer never acknowledged (wrong GID / link-local GID, traffic class without PFC, "
        "a down link, or NCCL_IB_TIMEOUT too low)",
    4: "LOC_PROT_ERR: memory registration failed (GPUDirect RDMA / peer memory module, ACS)",
    5: "WR_FLUSH_ERR: flushed after an earlier error on the same queue pair",
}
_COMPLETION_WARN = re.compile(r"Got completion from peer (?P<peer>[^<\s]+)")


def link_subject(host: str, peer: str) -> str:
    """The subject of the findings about one link (they become one finding)."""
    return f"the link {host} -> {peer}"


def warns(ctx: NcclContext) -> list[Finding]:
    total = sum(ctx.warn_lines.values())
    if total == 0:
        return []
    messages: Counter[str] = Counter()
    refs: list[str] = []
    hosts: set[str] = set()
    links: set[str] = set()  # the link each WARN line is a completion error of ("" when it is not one)
    for p in ctx.procs:
        for value, line, count in p.facts.get("warn", []):
            messages[value] += count
            hosts.add(p.host)
            completion = _COMPLETION_WARN.search(value)
            links.add(link_subject(p.host or "?", completion.group("peer")) if completion else "")
            if len(refs) < 8:
                refs.append(f"{p.file}:{line}: {value[:200]}")
    chains = [f"{p.where('error_chain')}" for p in ctx.procs if p.has("error_chain")][:4]
    top = messages.most_common(1)[0][0] if messages else "NCCL WARN"
    return [finding("nccl_warn", Severity.WARNING, f"NCCL printed {total} WARN line(s): {top[:120]}",
                    "Read the first WARN of each process: it names the failing call; the `-> N` lines after it "
                    "show where the error propagated (2 = system error, 3 = internal, 6 = remote).",
                    {"warn_lines": total, "distinct": dict(messages.most_common(10)), "log": refs,
                     "error_chains": chains}, hosts=sorted(hosts),
                    # WARN lines that are all one link's completion errors are that link's problem
                    subject=next(iter(links)) if len(links) == 1 else "")]


def completion_errors(ctx: NcclContext) -> Iterator[Finding]:
    pairs: dict[tuple[str, str], list[tuple[dict[str, object], str]]] = {}
    for p in [*ctx.procs, *ctx.orphans.values()]:
        for value, line, count in p.facts.get("completion_error", []):
            try:
                err = json.loads(value)
            except ValueError:
                continue
            pairs.setdefault((p.host or "?", str(err.get("peer", "?"))), []).extend([(err, f"{p.file}:{line}")] * count)
        for value in p.values("cqe_error"):
            pairs.setdefault((p.host or "?", "?"), []).append(({"text": value}, p.where("cqe_error")))
    for (host, peer), errs in sorted(pairs.items()):
        statuses = Counter(str(e.get("status")) for e, _ in errs if e.get("status") is not None)
        vendors = sorted({str(e.get("vendor_err")) for e, _ in errs if e.get("vendor_err") is not None})
        gids = sorted({str(e.get(k)) for e, _ in errs for k in ("local_gid", "remote_gid") if e.get(k)})
        hints = [_STATUS_HINT[int(s)] for s in statuses if s.isdigit() and int(s) in _STATUS_HINT]
        if any(g.lower().startswith("fe80") for g in gids):
            hints.insert(0, "a link-local (fe80) GID is in use: set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID")
        yield finding(
            "ib_completion_error", Severity.CRITICAL,
            f"IB completion errors on link {host} -> {peer} ({len(errs)}x, status {', '.join(statuses) or '?'})",
            "; ".join(hints) or "Check the link between these hosts (ibv_devinfo, port counters, switch logs).",
            {"host": host, "peer": peer, "count": len(errs), "statuses": dict(statuses), "vendor_errs": vendors,
             "gids": gids, "log": [w for _, w in errs[:5]]}, hosts=[host], key=f"{host}|{peer}",
            subject=link_subject(host, peer))


def slow_init(ctx: NcclContext) -> list[Finding]:
    slow: list[tuple[float, str, str, dict[str, object]]] = []
    for p in ctx.procs:
        for t in p.jsons("init_timings"):
            total = float(str(t.get("total", 0)))
            if total >= threshold("nccl.slow_init_s"):
                parts = t.get("parts") if isinstance(t.get("parts"), dict) else {}
                slow.append((total, p.host, p.where("init_timings"), parts or {}))
    if not slow:
        return []
    slow.sort(reverse=True)
    total, _host, _where, parts = slow[0]
    worst = max(parts.items(), key=lambda kv: float(str(kv[1])))[0] if parts else "?"
    return [finding("slow_init", Severity.WARNING, f"NCCL communicator init took {total:.1f} s (mostly {worst})",
                    "bootstrap-dominated init points at the OOB/socket interface or rank stagger; kernels-dominated "
                    "at CUDA module loading (set CUDA_MODULE_LOADING=LAZY).",
                    {"total_s": total, "parts": parts, "log": [w for _, _, w, _ in slow[:5]]},
                    hosts=[h for _, h, _, _ in slow])]
