"""The `crash` analyzer: offline hang and crash diagnosis from flight-recorder dumps and job logs.

Reads the Store's `collectives_fr` and `failures` tables and the wait-for graph (`waitview.graph_of`); one
finding per cause, naming culprit ranks and hosts.
"""

from __future__ import annotations

import re
from collections import Counter

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import who
from perftracker.analyzers.failures.fold import fold_into
from perftracker.analyzers.failures.roots import STUCK_ADVICE, on_hosts, root_findings, where
from perftracker.analyzers.failures.waitfor import members
from perftracker.analyzers.failures.waitsources import LOST_CONNECTION, LOST_PEER, world_size
from perftracker.analyzers.failures.waitview import graph_of
from perftracker.analyzers.findings import Finding, Mark, Severity
from perftracker.evidence import as_evidence
from perftracker.evidence.failures import CrashEvidence, RanCall
from perftracker.store import Store

_SEVERE_XID = {48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}
_WHOLE = ("", "0", "default_pg")  # process groups of every rank when their configuration is unknown
_KILLED = {-15, -9, 15, 9}  # the launcher's SIGTERM / SIGKILL after another rank failed
_UNEVEN = re.compile(r"all_?to_?all|alltoall", re.IGNORECASE)
_TIMEOUT_MS = re.compile(r"(?:waiting |timeout )(\d+) ?ms")
_CHECK = ("Look at what the culprit rank did instead: its log and traceback (the evidence names the files), "
          "a rank-dependent branch that skips or reorders a collective, a stuck data loader or file system, "
          "a dead GPU (Xid) or host. `perftracker attach --stacks` on a live hang shows where it is; "
          "TORCH_DISTRIBUTED_DEBUG=DETAIL checks collective order; dist.monitored_barrier() names a missing rank.")


def host_map(store: Store) -> dict[int, str]:
    """rank -> host from every table that knows one."""
    hosts: dict[int, str] = {}
    for name in ("ranks", "nccl", "stacks", "failures", "collectives_fr"):
        frame = store[name]
        if frame.empty or "host" not in frame:
            continue
        for rank, host in zip(frame["rank"], frame["host"]):
            if isinstance(host, str) and host and int(rank) >= 0:
                hosts.setdefault(int(rank), host)
    return hosts


def fr_findings(store: Store, hosts: dict[int, str], world: int) -> list[Finding]:
    fr = store["collectives_fr"]
    fr = fr[fr["seq"] >= 0]
    if fr.empty:
        return []
    status = store.run_info.fr_pg_status
    out: list[Finding] = []
    for pg, rows in fr.groupby("pg", sort=True):
        pg = str(pg)
        entered: dict[int, int] = {}
        completed: dict[int, int] = {}
        for rank, mine in rows.groupby("rank"):
            r = int(str(rank))
            st = (status.get(str(r)) or {}).get(pg) or {}
            done = mine[(mine["state"] == "completed") | mine["retired"]]
            entered[r] = int(st.get("last_enqueued_collective", mine["seq"].max()))
            completed[r] = int(st.get("last_completed_collective", done["seq"].max() if len(done) else -1))
        mismatch = _mismatch(pg, rows, hosts)
        out.extend(mismatch)
        top = max(entered.values())
        waiting = sorted(r for r, e in entered.items() if e >= top and completed[r] < top)
        if not waiting:
            continue
        group = members(store, pg, list(entered), world, _WHOLE)
        behind = sorted(r for r in group if r in entered and entered[r] < top)
        no_dump = sorted(r for r in group if r not in entered)
        at_top = rows[(rows["seq"] == top) & rows["rank"].isin(waiting)]
        if at_top.empty:  # the dumps' status names a collective none of their entries holds (ring buffer rolled)
            continue
        ref = at_top.iloc[0]
        desc = str(ref["pg_desc"])
        what = f"collective #{top} ({ref['op']}, pg {pg}{f' {desc}' if desc else ''}, sizes {ref['input_sizes']})"
        evidence = CrashEvidence(pg=pg, pg_desc=desc, seq=top, op=str(ref["op"]), input_sizes=str(ref["input_sizes"]),
                                 dtypes=str(ref["dtypes"]), waiting_ranks=waiting, never_entered=behind,
                                 no_dump=no_dump[:64], per_rank={
                                     str(r): {"last_entered": entered[r], "last_completed": completed[r]}
                                     for r in sorted(entered)[:256]})
        culprits = behind or no_dump
        if culprits:
            last = "; ".join(f"rank {r} last entered #{entered[r]}" for r in behind[:6])
            title = (f"{who(culprits)}{where(culprits, hosts)} never entered {what} that "
                     f"{who(waiting).lower()} wait in" + (f"; {last}" if last else "; no flight-recorder dump"))
            rec = _CHECK
        elif mismatch and as_evidence(mismatch[0].evidence, CrashEvidence).get("seq") == top:
            continue  # the mismatch finding explains why nobody completes it
        else:
            culprits = waiting
            title = f"Every rank entered {what} and none completed it: the collective itself is stuck"
            rec = STUCK_ADVICE
        out.append(Finding("crash", Severity.CRITICAL, title, rec, evidence, ranks=tuple(culprits),
                           hosts=on_hosts(hosts, culprits), key=f"crash:fr:{pg}:{top}"))
    return out


def _mismatch(pg: str, rows: pd.DataFrame, hosts: dict[int, str]) -> list[Finding]:
    for seq, at in rows.groupby("seq", sort=True):
        # all-to-all splits are uneven by design (MoE token dispatch): only its op must agree across ranks
        sig = {int(r): (str(o), "" if _UNEVEN.search(str(o)) else str(s))
               for r, o, s in zip(at["rank"], at["op"], at["input_sizes"])}
        kinds = Counter(sig.values())
        if len(kinds) < 2:
            continue
        major = kinds.most_common(1)[0][0]
        odd = sorted(r for r, k in sig.items() if k != major)
        majority = sorted(r for r, k in sig.items() if k == major)
        odd_s = "; ".join(f"rank {r} ran {sig[r][0]} {sig[r][1]}" for r in odd[:6])
        title = (f"Mismatched collective at pg {pg} #{int(str(seq))}: {who(majority).lower()} ran {major[0]} {major[1]}, "
                 f"but {odd_s}{where(odd, hosts)}")
        rec = ("Every rank of a process group must issue the same collectives with the same sizes in the same order. "
               "Find the rank-dependent code path (data-dependent shapes, a conditional collective, uneven inputs "
               "to all_gather without padding); TORCH_DISTRIBUTED_DEBUG=DETAIL reports such mismatches at the call.")
        others: dict[str, RanCall] = {str(r): {"op": sig[r][0], "sizes": sig[r][1]} for r in odd[:64]}
        evidence = CrashEvidence(pg=pg, seq=int(str(seq)), majority={"ranks": majority, "op": major[0], "sizes": major[1]},
                                 others=others)
        return [Finding("crash", Severity.CRITICAL, title, rec, evidence, ranks=tuple(odd), hosts=on_hosts(hosts, odd),
                        key=f"crash:mismatch:{pg}:{int(str(seq))}")]
    return []


def timeout_findings(store: Store, hosts: dict[int, str], world: int) -> list[Finding]:
    fail = store["failures"]
    out: list[Finding] = []
    nccl = fail[(fail["kind"] == "timeout") & (fail["rank"] >= 0)]
    if not nccl.empty:
        groups: dict[tuple[int, str], set[int]] = {}
        for s_, o_, r_ in zip(nccl["seq"], nccl["op"], nccl["rank"]):
            groups.setdefault((int(s_), str(o_)), set()).add(int(r_))
        (seq, op), ranks = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0][0]))
        timed = sorted(ranks)
        rows = nccl[(nccl["seq"] == seq) & (nccl["op"] == op)]
        pg = next((str(p) for p in rows["pg"] if p), "")
        numel = int(rows["numel"].max())
        tmo = re.search(r"timeout (\d+) ms", str(rows["message"].iloc[0]))
        extra = ", ".join(x for x in (f"pg {pg}" if pg else "", f"{numel} elements" if numel >= 0 else "") if x)
        what = f"{op.upper()} SeqNum {int(seq)}{f' ({extra})' if extra else ''}"
        evidence = CrashEvidence(
            seq=int(seq), op=op, pg=pg, numel=numel, timed_out_ranks=timed,
            other_timeouts={f"{s}:{o}": sorted(r) for (s, o), r in groups.items() if (s, o) != (seq, op)},
            lines=[f"{f}:{ln}" for f, ln in zip(rows["file"], rows["line"])][:16],
            watchdog_progress=store.run_info.watchdog_progress)
        out.append(_missing_finding(store, "nccl", what, timed, pg, hosts, world, evidence,
                                    f" after {int(tmo.group(1))} ms" if tmo else ""))
    gloo = fail[(fail["kind"] == "gloo_timeout") & (fail["rank"] >= 0)]
    if not gloo.empty:
        ops = Counter(str(o) for o in gloo["op"] if o).most_common(1)
        sites = Counter(str(m).split("(at ")[-1].rstrip(")") for m in gloo["message"] if "(at " in str(m)).most_common(1)
        gloo_op, site = (ops[0][0] if ops else ""), (sites[0][0] if sites else "")
        tmo = _TIMEOUT_MS.search(str(gloo["message"].iloc[0]))
        what = f"{gloo_op or 'a collective'}{f' ({site})' if site else ''}"
        timed = sorted({int(r) for r in gloo["rank"]})
        # A rank still inside the collective when a timed-out peer exited sees its connection closed before its
        # own timeout fires (which rank times out first is a race): it joined, it is not the missing one.
        lost = fail[(fail["kind"] == "exception") & (fail["rank"] >= 0)
                    & fail["message"].astype(str).str.contains(_LOST_CONNECTION)]
        lost_peer = sorted({int(r) for r in lost["rank"]} - set(timed))
        evidence = CrashEvidence(op=gloo_op, site=site, timed_out_ranks=timed, lost_peer_ranks=lost_peer,
                                 lines=[f"{f}:{ln}" for f, ln in zip(gloo["file"], gloo["line"])][:16])
        out.append(_missing_finding(store, "gloo", what, timed, "", hosts, world, evidence,
                                    f" after {int(tmo.group(1))} ms" if tmo else "", lost_peer))
    return out


def _missing_finding(store: Store, backend: str, what: str, timed: list[int], pg: str, hosts: dict[int, str],
                     world: int, evidence: CrashEvidence, after: str, lost_peer: list[int] | None = None) -> Finding:
    """The ranks of the collective's group that neither timed out in it nor lost their peers inside it."""
    lost_peer = lost_peer or []
    missing = sorted(set(members(store, pg, timed, world, _WHOLE)) - set(timed) - set(lost_peer))
    fail = store["failures"]
    if missing:
        exits = fail[fail["rank"].isin(missing)]
        evidence["culprit_lines"] = [f"{k} {f}:{ln}: {m[:160]}" for k, f, ln, m in
                                     zip(exits["kind"], exits["file"], exits["line"], exits["message"])][:16]
        also = f" and {who(lost_peer).lower()} then lost {'its' if len(lost_peer) == 1 else 'their'} peers" if lost_peer else ""
        title = (f"{who(missing)}{where(missing, hosts)} never joined {what} where "
                 f"{who(timed).lower()} timed out{after}{also} ({backend})")
        return Finding("crash", Severity.CRITICAL, title, _CHECK, evidence, ranks=tuple(missing),
                       hosts=on_hosts(hosts, missing), key=f"crash:{backend}:{what}")
    title = f"All {len(timed)} ranks timed out in {what}{after} ({backend}): no rank is missing from it"
    rec = ("Every rank entered the collective and it never finished: look at the network (NCCL WARN and IB "
           "completion-error findings name the failing link), Xid findings (a failed GPU), or a rank of another "
           "process group holding this one up. Raise the timeout only if the collective is legitimately slow.")
    return Finding("crash", Severity.CRITICAL, title, rec, evidence, ranks=tuple(timed), hosts=on_hosts(hosts, timed),
                   key=f"crash:{backend}:{what}:all")


_LOST_CONNECTION = re.compile(LOST_CONNECTION, re.IGNORECASE)
_CONSEQUENCE = re.compile(LOST_PEER.pattern + "|SIGTERM|Signal 15|ProcessGroup.*abort|NCCL communicator was aborted",
                          re.IGNORECASE)


def first_failure(store: Store, hosts: dict[int, str]) -> list[Finding]:
    fail = store["failures"]
    fail = fail[(fail["rank"] >= 0) & fail["kind"].isin(["exception", "exit", "timeout", "gloo_timeout"])]
    if fail.empty:
        return []
    timed = set(int(r) for r in fail.loc[fail["kind"].isin(["timeout", "gloo_timeout"]), "rank"])
    primary: dict[int, pd.DataFrame] = {}
    for rank, rows in fail.groupby("rank"):
        r = int(str(rank))
        exc = rows[rows["kind"] == "exception"]
        exits = rows[(rows["kind"] == "exit") & ~rows["numel"].isin(list(_KILLED))]
        if len(exc) or (r not in timed and len(exits)):
            primary[r] = rows
    if not primary:
        return []

    def when(r: int) -> tuple[int, int, int, int]:
        # An error that reports another worker's death (a closed connection, a peer reset) is a
        # consequence: rank those after errors of their own. Then by time, then by log position.
        # A rank's own exception speaks for it: the launcher's SIGTERM to a rank that was still printing its
        # traceback must not make that rank's error a consequence.
        own = primary[r][primary[r]["kind"] == "exception"]
        messages = " ".join(str(m) for m in (own if len(own) else primary[r])["message"])
        secondary = int(bool(_CONSEQUENCE.search(messages)))
        ts = [int(t) for t in primary[r]["ts_ns"] if int(t) >= 0]
        lines = [int(x) for x in primary[r]["line"] if int(x) >= 0]
        return (secondary, min(ts) if ts else 1 << 62, min(lines) if lines else 1 << 62, r)

    order = sorted(primary, key=when)
    first = order[0]
    rows = primary[first]
    exc = rows[rows["kind"] == "exception"]
    row = (exc if len(exc) else rows).iloc[0]
    consequence, ts = when(first)[0], when(first)[1]
    at = f" at {pd.Timestamp(ts, unit='ns', tz='UTC').isoformat()}" if ts < 1 << 62 else ""
    title = f"Rank {first}{where([first], hosts)} failed first{at}: {str(row['message'])[:200]}"
    if consequence:  # every error is about a lost peer: the one that died first left none of its own
        title = (f"Rank {first}{where([first], hosts)} was the first to report an error{at}, and it is about a "
                 f"lost peer, not its own: {str(row['message'])[:200]}")
    evidence = CrashEvidence(rank=first, message=str(row["message"]), where=f"{row['file']}:{row['line']}",
                             failed_ranks_in_order=order[:64],
                             others={str(r): str(primary[r].iloc[0]["message"])[:200] for r in order[1:9]})
    rec = ("Fix this rank's error first: the other ranks' failures (timeouts, SIGTERM from the launcher) follow "
           "from it. torchrun's 'Root Cause (first observed failure)' is the first failure the launcher noticed, "
           "which is not always the first that happened.")
    if consequence:
        rec = ("Every rank's error is about a peer that closed or reset its connection: the rank or node that died "
               "first left no error of its own (killed, out of memory, the node lost). Look for it at the peer "
               "address in these messages, in the kernel log of that node (OOM killer, reboot) and among hosts that "
               "went silent before the others.")
        evidence["consequence_of_a_lost_peer"] = True
    return [Finding("crash", Severity.CRITICAL, title, rec, evidence, ranks=(first,), hosts=on_hosts(hosts, [first]),
                    key=Mark.FIRST_FAILURE.key(first))]


def xid_findings(store: Store) -> list[Finding]:
    fail = store["failures"]
    xid = fail[fail["kind"] == "xid"]
    out: list[Finding] = []
    for (host, code), rows in xid.groupby(["host", "numel"]):
        code = int(str(code))
        severe = code in _SEVERE_XID
        title = f"GPU Xid {code} on {host or 'a host'} ({len(rows)} line(s)): {str(rows['message'].iloc[0])[:160]}"
        rec = ("The GPU failed (fallen off the bus, uncorrectable ECC, NVLink or GSP error): drain the node, "
               "reset or replace the GPU (nvidia-smi -q, field diagnostics) before rescheduling the job there."
               if severe else "Xid errors of this code are usually raised by the application (illegal memory "
               "access, MMU fault): check the failing rank's traceback; if they repeat on one node, test its GPU.")
        evidence = CrashEvidence(xid=code, host=str(host),
                                 lines=[f"{f}:{ln}" for f, ln in zip(rows["file"], rows["line"])][:16])
        out.append(Finding("crash", Severity.CRITICAL if severe else Severity.WARNING, title, rec, evidence,
                           hosts=(str(host),) if host else (), key=f"crash:xid:{host}:{code}"))
    return out


def analyze_crash(analysis: Analysis) -> list[Finding]:
    """Offline hang and crash diagnosis: culprit ranks and hosts of a failed or hung job.

    With flight-recorder dumps, the wait-for graph across process groups (`waitfor`) gives one finding
    per root; the stuck collectives behind it are its evidence, and the other rules' findings it
    explains (timeouts of waiting ranks, their errors, the roots' Xids) are folded into it."""
    store = analysis.store
    if store["collectives_fr"].empty and store["failures"].empty and not store.run_info.fr_pg_status:
        return []
    hosts = host_map(store)
    world = world_size(store)
    graph = analysis.view(graph_of)
    others = [*timeout_findings(store, hosts, world), *first_failure(store, hosts), *xid_findings(store)]
    if not graph.roots:
        return [*fr_findings(store, hosts, world), *others]
    fr = store["collectives_fr"]
    mismatches = [f for pg, rows in fr[fr["seq"] >= 0].groupby("pg", sort=True) for f in _mismatch(str(pg), rows, hosts)]
    if mismatches and all(r.kind == "stuck collective" for r in graph.roots):
        return [*mismatches, *others]  # the mismatch explains why nobody completes: it is the root
    roots = root_findings(graph, hosts, store["failures"], store["collectives_fr"])
    return fold_into(roots, [*mismatches, *others])
