"""One critical finding per root of a hung or failed job, with what waits behind it as its evidence.

`root_findings(graph, hosts, failures)` turns the roots of a `waitfor.WaitGraph` into findings.
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.common import ranks_text, who
from perftracker.analyzers.failures.waitfor import Root, Stall, WaitGraph
from perftracker.analyzers.findings import Finding, Kind, Mark, Severity
from perftracker.evidence import as_evidence
from perftracker.evidence.failures import Consequence, CrashEvidence

ANALYZER = Kind.CRASH
STUCK_ADVICE = ("No rank is missing: the communication itself stalled. Check the NCCL WARN / IB completion-error "
                "findings for the failing link (host pair, NIC, GID) and the Xid findings for a failed GPU.")


def on_hosts(hosts: dict[int, str], ranks: tuple[int, ...] | list[int]) -> tuple[str, ...]:
    return tuple(sorted({hosts[r] for r in ranks if r in hosts}))


def where(ranks: tuple[int, ...] | list[int], hosts: dict[int, str]) -> str:
    on = on_hosts(hosts, ranks)
    return f" on {', '.join(on)}" if on else ""


def _when(ns: int) -> str:
    return pd.Timestamp(ns, unit="ns", tz="UTC").isoformat() if ns > 0 else ""


def _own_errors(failures: pd.DataFrame, ranks: tuple[int, ...]) -> dict[int, str]:
    """rank -> its own exception, exit or Xid line (not a timeout: that is waiting, not failing)."""
    if failures.empty:
        return {}
    mine = failures[failures["rank"].isin(list(ranks)) & failures["kind"].isin(["exception", "exit"])]
    out: dict[int, str] = {}
    for rank, kind, msg, code in zip(mine["rank"], mine["kind"], mine["message"], mine["numel"]):
        text = f"exited with code {int(code)}" if kind == "exit" and int(code) != -1 else str(msg)[:160]
        out.setdefault(int(rank), text)
    return out


def _xids(failures: pd.DataFrame, hosts: tuple[str, ...]) -> list[str]:
    if failures.empty or not hosts:
        return []
    xid = failures[(failures["kind"] == "xid") & failures["host"].isin(list(hosts))]
    return sorted({f"Xid {int(c)} on {h}" for c, h in zip(xid["numel"], xid["host"])})


def _what(graph: WaitGraph, root: Root) -> str:
    """What the root ranks last did, in one clause."""
    if root.kind == "stalled":
        stalls = "; ".join(f"rank {s.rank} saw pg {s.pg} complete up to #{s.completed}, rank {s.peer} "
                           f"up to #{s.peer_completed}" for s in _first_stall_per_rank(root)[:2])
        return f"stopped completing collectives while their peers went on ({stalls}): their GPU or its watchdog stopped"
    if root.kind == "no dump":
        missing = _missing_in(root)
        never = f" and never entered {missing}" if missing else ""
        if set(root.ranks) <= set(graph.silent):
            their, they = ("their", "they") if len(root.ranks) > 1 else ("its", "it")
            return f"left no dump, no stack and no error of {their} own{never}: {they} died or hung unseen"
        return "left no flight-recorder dump" + never
    if root.kind == "cycle":
        return "wait for each other in different collectives (the ranks disagree on the order of collectives)"
    if root.kind == "stuck collective":
        return "all entered their collectives and none completed: the communication itself is stuck"
    missing = _missing_in(root)
    return f"never entered {missing}" if missing else "are not blocked in any collective"


def _first_stall_per_rank(root: Root) -> list[Stall]:
    """Each stalled rank's widest stall (the group where its peer saw the most complete that it did not)."""
    seen: dict[int, Stall] = {}
    for s in sorted(root.stalls, key=lambda s: (s.rank, -(s.peer_completed - s.completed), s.pg)):
        seen.setdefault(s.rank, s)
    return list(seen.values())


def _missing_in(root: Root) -> str:
    mine = set(root.ranks)
    held = sorted((b for b in root.groups if set(b.absent) & mine and b.source == "flight recorder"),
                  key=lambda b: (-len(b.entered), b.pg))
    if not held:
        return ""
    return held[0].label + (f" and {len(held) - 1} more collective{'s' if len(held) > 2 else ''}" if len(held) > 1
                            else "")


def last_entered(fr: pd.DataFrame, ranks: tuple[int, ...]) -> dict[int, str]:
    """rank -> the last collective its own dump lists ("its dump lists no collective" when empty)."""
    out: dict[int, str] = {}
    mine = fr[fr["rank"].isin(list(ranks))] if len(fr) else fr
    last_rows = mine.sort_values("time_created_ns", kind="stable").groupby("rank").tail(1) if len(mine) else mine
    latest = {int(str(e["rank"])): e for _, e in last_rows.iterrows()}  # one pass, linear in the rows
    for rank in ranks:
        if rank not in latest:
            out[rank] = "its dump lists no collective"
            continue
        e = latest[rank]
        seq = int(e["p2p_seq"]) if int(e["seq"]) < 0 else int(e["seq"])
        desc = f" {e['pg_desc']}" if str(e["pg_desc"]) else ""
        out[rank] = f"last entered pg {e['pg']}{desc} #{seq} ({e['op']})"
    return out


def consequence(root: Root) -> str:
    """'13 ranks in 9 process groups wait behind them' (or '' when nobody does)."""
    if not root.behind:
        return ""
    groups = {b.pg for b in root.groups}
    them = "it" if len(root.ranks) == 1 else "them"
    verb = "waits" if len(root.behind) == 1 else "wait"
    return (f"{len(root.behind)} rank{'s' if len(root.behind) != 1 else ''} in {len(groups)} process "
            f"group{'s' if len(groups) != 1 else ''} {verb} behind {them}")


def consequence_rows(root: Root) -> list[Consequence]:
    """The evidence table: one row per stuck collective the root holds up."""
    return [Consequence(pg=b.pg, pg_desc=b.desc, seq=b.seq, op=b.op, sizes=b.sizes, waiting_ranks=list(b.entered[:64]),
                        missing_ranks=list(b.absent[:64]), no_dump=list(b.no_dump[:64]), since=_when(b.since_ns),
                        source=b.source) for b in sorted(root.groups, key=lambda b: (-len(b.entered), b.pg))]


_LOOK_ELSEWHERE = ("Look at what these ranks did instead of the collective: their logs and tracebacks, a rank-dependent "
                   "branch that skips a collective, a stuck data loader or file system, a thread holding the GIL, a "
                   "dead GPU (Xid) or host. `perftracker attach --stacks` on a live hang shows where they are; the "
                   "other ranks only wait behind them.")
# root kind -> (confidence, graded by what the root rests on (docs/internals/analyzers.md); recommendation)
_KINDS: dict[str, tuple[float, str]] = {
    "stalled": (0.9, "Look at these ranks' GPUs first: their collectives stopped completing while their peers' went "
                "on, which is what a GPU error (Xid, ECC, a fallen-off GPU), a hung kernel or a stopped watchdog "
                "thread looks like. Check the host's kernel log (NVRM Xid), nvidia-smi -q and the rank's log; the "
                "other ranks only wait behind them."),
    "cycle": (0.8, "The ranks wait for each other in different collectives: make every rank issue the same "
              "collectives in the same order on each process group (a rank-dependent branch, a different group "
              "order). TORCH_DISTRIBUTED_DEBUG=DETAIL reports mismatched collectives at the call."),
    "stuck collective": (0.6, STUCK_ADVICE),
    "missing": (0.95, _LOOK_ELSEWHERE),
    "no dump": (0.9, _LOOK_ELSEWHERE),
}


def root_finding(graph: WaitGraph, root: Root, hosts: dict[int, str], failures: pd.DataFrame,
                 fr: pd.DataFrame) -> Finding:
    on = on_hosts(hosts, root.ranks)
    extra = []
    own = _own_errors(failures, root.ranks)
    if own:
        extra.append("; ".join(f"rank {r}: {m}" for r, m in sorted(own.items())[:3]))
    stacks = {r: graph.at[r] for r in root.ranks if r in graph.at}
    if stacks:
        extra.append("; ".join(f"rank {r} stack at {w}" for r, w in sorted(stacks.items())[:2]))
    extra.extend(_xids(failures, on)[:3])
    last = last_entered(fr, root.ranks) if root.kind in ("missing", "cycle") else {}
    if last and len(set(last.values())) == 1:
        extra.append(next(iter(last.values())).replace("its dump lists", "their dumps list" if len(last) > 1 else "its dump lists"))
    elif last:
        extra.append("; ".join(f"rank {r} {t}" for r, t in sorted(last.items())[:2]))
    no_dump = sorted(set(root.ranks) & {r for b in graph.blocked for r in b.no_dump})
    if no_dump and root.kind != "no dump":
        extra.append(f"rank{'s' if len(no_dump) > 1 else ''} {ranks_text(no_dump)} left no dump")
    title = f"{who(root.ranks)}{where(root.ranks, hosts)} {_what(graph, root)}"
    if extra:
        title += f" ({'; '.join(extra)})"
    tail = consequence(root)
    if tail:
        title += f"; {tail}"
    evidence = CrashEvidence(
        root_ranks=list(root.ranks), kind=root.kind, last={str(r): t for r, t in sorted(root.last.items())[:256]},
        last_entered={str(r): t for r, t in sorted(last.items())[:256]},
        waiting_behind=list(root.behind[:256]), consequences=consequence_rows(root),
        stalls=[{"rank": s.rank, "pg": s.pg, "pg_desc": s.desc, "last_completed": s.completed, "peer": s.peer,
                 "peer_completed": s.peer_completed} for s in root.stalls[:64]],
        own_errors={str(r): m for r, m in own.items()}, no_dump=no_dump, roots_in_job=len(graph.roots))
    confidence, advice = _KINDS.get(root.kind, (0.6, _LOOK_ELSEWHERE))
    return Finding(ANALYZER, Severity.CRITICAL, title, advice, evidence, ranks=root.ranks, hosts=on,
                   key=Mark.WAIT_ROOT.key(root.kind, list(root.ranks)), confidence=confidence)


def root_findings(graph: WaitGraph, hosts: dict[int, str], failures: pd.DataFrame, fr: pd.DataFrame) -> list[Finding]:
    return [root_finding(graph, root, hosts, failures, fr) for root in graph.roots]


def explained_ranks(findings: list[Finding]) -> tuple[set[int], set[int]]:
    """(root ranks, ranks waiting behind a root) over the root findings among `findings`."""
    roots: set[int] = set()
    behind: set[int] = set()
    for f in findings:
        if Mark.WAIT_ROOT.on(f):
            roots |= set(f.ranks)
            behind |= set(as_evidence(f.evidence, CrashEvidence).get("waiting_behind", []))
    return roots, behind
