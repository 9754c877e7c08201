"""Who waits for whom across process groups, and the ranks at the end of the waiting: the roots.

`wait_graph(store)` builds one `WaitGraph` from what the Store knows about where each rank stopped.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass, field

import pandas as pd

from perftracker.analyzers.failures.waitsources import Elsewhere, other_sources
from perftracker.store import Store
from perftracker.values import pg_ranks

# A stuck collective with many waiting and many absent members is one node between them (a hub, numbered
# below HUB_FLOOR, never a rank): entered -> hub -> absent, so the graph is linear in ranks (edges one by one
# were 4096 x 4096 for one world group with half of 8,192 ranks missing: 2.4 GB).
HUB_FLOOR = -(1 << 40)
MAX_LAST = 256  # root ranks whose last act is written out (the evidence shows as many)


@dataclass(frozen=True)
class Blocked:
    """One process group's stuck collective: its first sequence number no member saw complete."""

    pg: str
    desc: str
    seq: int
    op: str
    sizes: str
    entered: tuple[int, ...]
    missing: tuple[int, ...]  # members with a dump that never entered it
    no_dump: tuple[int, ...]  # members that left no dump
    since_ns: int  # when the first rank entered it (-1 unknown)
    source: str = "flight recorder"

    @functools.cached_property
    def absent(self) -> tuple[int, ...]:
        """The members that never entered it (with a dump or without), sorted once."""
        return tuple(sorted({*self.missing, *self.no_dump}))

    @functools.cached_property
    def absent_set(self) -> frozenset[int]:
        return frozenset(self.absent)

    @property
    def label(self) -> str:
        desc = f" {self.desc}" if self.desc else ""
        return f"pg {self.pg}{desc} #{self.seq}" + (f" ({self.op})" if self.op else "")


@dataclass(frozen=True)
class Stall:
    """A rank whose completions stopped while a peer of the same group saw later ones complete."""

    rank: int
    pg: str
    desc: str
    completed: int  # the last collective it saw complete
    peer: int
    peer_completed: int


@dataclass(frozen=True)
class Root:
    """Ranks at the end of the waiting that stopped together, what they last did, and who waits behind them."""

    ranks: tuple[int, ...]
    kind: str  # "missing" | "no dump" | "stalled" | "cycle" | "stuck collective"
    last: dict[int, str]  # rank -> what it last did (its last collective entered, its stall), the first MAX_LAST
    behind: tuple[int, ...]  # every rank that waits for them, directly or not
    groups: tuple[Blocked, ...]  # the stuck collectives they hold up (the consequences)
    stalls: tuple[Stall, ...] = ()


@dataclass
class WaitGraph:
    blocked: list[Blocked] = field(default_factory=list)
    edges: dict[int, dict[int, list[Blocked]]] = field(default_factory=dict)  # waiter -> waited-on -> via
    stalls: list[Stall] = field(default_factory=list)
    roots: list[Root] = field(default_factory=list)
    cycles: list[list[int]] = field(default_factory=list)  # sets of ranks waiting for each other
    silent: tuple[int, ...] = ()  # ranks that left no dump, no stack and no line of their own
    at: dict[int, str] = field(default_factory=dict)  # where the stacks show ranks that wait in no call

    @property
    def waiting(self) -> tuple[int, ...]:
        return tuple(sorted(n for n in self.edges if n > HUB_FLOOR))


def _p2p_counted(store: Store) -> dict[tuple[int, str], pd.DataFrame]:
    """(rank, pg) -> that rank's point-to-point entries in the group, where its pg_status counts p2p
    operations (PyTorch reports the counter of the last operation enqueued: its p2p_seq_id when that was a
    send or recv)."""
    fr = store["collectives_fr"]
    p2p = fr[(fr["seq"] < 0) & (fr["p2p_seq"] >= 0)] if len(fr) else fr
    out: dict[tuple[int, str], pd.DataFrame] = {}
    for (pg, rank), rows in p2p.groupby(["pg", "rank"]) if len(p2p) else []:
        st = (store.run_info.fr_pg_status.get(str(rank)) or {}).get(str(pg)) or {}
        if int(st.get("last_enqueued_collective", -2)) == int(rows["p2p_seq"].max()):
            out[(int(str(rank)), str(pg))] = rows
    return out


def _progress(store: Store) -> tuple[dict[str, dict[int, tuple[int, int]]], set[str]]:
    """pg -> rank -> (last enqueued, last completed) collective, and the groups left out: point-to-point
    only, or a rank's pg_status counts p2p operations there (its numbers are not collective ones)."""
    fr = store["collectives_fr"]
    status = store.run_info.fr_pg_status
    p2p_only = {str(pg) for pg, rows in fr.groupby("pg") if (rows["seq"] < 0).all()} if len(fr) else set()
    p2p_only |= {pg for _, pg in _p2p_counted(store)}
    out: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for rank_s, groups in status.items():
        for pg, st in groups.items():
            if pg in p2p_only or not rank_s.lstrip("-").isdigit():
                continue
            out[pg][int(rank_s)] = (int(st.get("last_enqueued_collective", -1)),
                                    int(st.get("last_completed_collective", -1)))
    coll = fr[fr["seq"] >= 0] if len(fr) else fr
    for (pg_key, rank), rows in coll.groupby(["pg", "rank"]) if len(coll) else []:
        pg, r = str(pg_key), int(str(rank))
        if pg in p2p_only or r in out[pg]:
            continue
        done = rows[(rows["state"] == "completed") | rows["retired"]]
        out[pg][r] = (int(rows["seq"].max()), int(done["seq"].max()) if len(done) else -1)
    return out, p2p_only


def members(store: Store, pg: str, known: list[int], world: int,
            whole: tuple[str, ...] = ("0", "default_pg")) -> list[int]:
    """The ranks of process group `pg`: its configuration's, else the world for the groups named in `whole`,
    else the `known` ones."""
    ranks = pg_ranks(store.run_info.fr_pg_config, pg)
    if ranks:
        return ranks
    if pg in whole and world > 0:
        return list(range(world))
    return sorted(known)


def _describe(fr: pd.DataFrame, pg: str, seq: int, ranks: tuple[int, ...]) -> tuple[str, str, str, int]:
    """(pg desc, op, sizes, since_ns) of collective `seq` of `pg` from the entries of `ranks`."""
    rows = fr[(fr["pg"] == pg)] if len(fr) else fr
    desc = next((str(d) for d in rows["pg_desc"] if str(d)), "") if len(rows) else ""
    at = rows[(rows["seq"] == seq) & rows["rank"].isin(list(ranks))] if len(rows) else rows
    if not len(at):
        return desc, "", "", -1
    created = [int(t) for t in at["time_created_ns"] if int(t) > 0]
    return desc, str(at["op"].iloc[0]), str(at["input_sizes"].iloc[0]), min(created) if created else -1


def fr_blocked(store: Store, world: int) -> tuple[list[Blocked], list[Stall], tuple[int, ...]]:
    """The stuck collective of every process group, the stalled ranks, and the ranks that left a dump."""
    progress, _ = _progress(store)
    fr = store["collectives_fr"]
    dumped = tuple(sorted({int(r) for r in store.run_info.fr_pg_status if r.lstrip("-").isdigit() and int(r) >= 0}
                          | ({int(r) for r in fr["rank"] if int(r) >= 0} if len(fr) else set())))
    blocked: list[Blocked] = []
    stalls: list[Stall] = []
    for pg in sorted(progress, key=lambda p: (len(p), p)):
        ranks = progress[pg]
        done = max(c for _, c in ranks.values())
        seq = done + 1
        entered = tuple(sorted(r for r, (e, _) in ranks.items() if e >= seq))
        if not entered:
            continue
        group = members(store, pg, list(ranks), world)
        missing = tuple(sorted(r for r in group if r in ranks and ranks[r][0] < seq))
        no_dump = tuple(sorted(r for r in group if r not in ranks and r not in dumped))
        unknown = tuple(sorted(r for r in group if r not in ranks and r in dumped))  # a dump without this pg
        desc, op, sizes, since = _describe(fr, pg, seq, entered)
        blocked.append(Blocked(pg, desc, seq, op, sizes, entered, tuple(sorted({*missing, *unknown})), no_dump,
                               since))
        peer = max(ranks, key=lambda r: (ranks[r][1], -r))
        for r, (_, c) in sorted(ranks.items()):
            if c < done and ranks[r][0] > c:  # it entered collectives its peer saw complete, and never saw them
                stalls.append(Stall(r, pg, desc, c, peer, done))
    return blocked, stalls, dumped


_P2P_OP = re.compile(r"(send|recv) (\d{1,7}) ?(?:->|<-) ?(\d{1,7})")


def p2p_blocked(store: Store, world: int) -> list[Blocked]:
    """The first send or recv each rank posted and never saw complete, per group, as a wait for its peer."""
    out: list[Blocked] = []
    for (rank, pg), rows in sorted(_p2p_counted(store).items()):
        st = store.run_info.fr_pg_status[str(rank)][pg]
        pending = rows[(rows["p2p_seq"] > int(st.get("last_completed_collective", -1))) & (rows["state"] != "completed")]
        if pending.empty:
            continue
        first = pending.sort_values("p2p_seq").iloc[0]
        match = _P2P_OP.search(str(first["op"]))
        group = members(store, pg, [], world, ("0",))
        peer_index = int(match.group(3)) if match else -1
        if not 0 <= peer_index < len(group) or group[peer_index] == rank:
            continue
        out.append(Blocked(pg, str(first["pg_desc"]), int(first["p2p_seq"]), str(first["op"]), str(first["input_sizes"]),
                           (rank,), (group[peer_index],), (), int(first["time_created_ns"]), "p2p"))
    return out


def _components(edges: dict[int, dict[int, list[Blocked]]], nodes: set[int]) -> dict[int, int]:
    """rank -> its strongly connected component (Kosaraju, iterative: linear in ranks and edges)."""
    order: list[int] = []
    seen: set[int] = set()
    for start in sorted(nodes):
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(edges.get(start, {})))]
        while stack:
            node, children = stack[-1]
            nxt = next((c for c in children if c not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(edges.get(nxt, {}))))
    back = _reverse(edges)
    comp: dict[int, int] = {}
    for start in reversed(order):
        if start not in comp:
            comp[start] = start
            _flood(back, [start], comp, start)
    return comp


def _reverse(edges: dict[int, dict[int, list[Blocked]]]) -> dict[int, list[int]]:
    back: dict[int, list[int]] = defaultdict(list)
    for waiter, targets in edges.items():
        for target in targets:
            back[target].append(waiter)
    return back


def _behind(edges: dict[int, dict[int, list[Blocked]]], ranks: set[int]) -> set[int]:
    """Every rank that waits for one of `ranks`, directly or through others."""
    seen = dict.fromkeys(ranks, 0)
    _flood(_reverse(edges), list(ranks), seen, 0)
    return {n for n in seen if n not in ranks and n > HUB_FLOOR}


def _flood(back: dict[int, list[int]], todo: list[int], marks: dict[int, int], label: int) -> None:
    """Mark every node that reaches one of `todo` through `back`'s edges, and is not marked yet, with `label`."""
    while todo:
        for prev in back.get(todo.pop(), ()):
            if prev not in marks:
                marks[prev] = label
                todo.append(prev)


def _edge(graph: WaitGraph, waiter: int, target: int, via: Blocked) -> None:
    if target != waiter:
        graph.edges.setdefault(waiter, {}).setdefault(target, []).append(via)
        if via.source in ("stack", "lost peer"):
            graph.blocked.append(via)


def _kinds(graph: WaitGraph, no_dump: set[int]) -> dict[int, str]:
    """rank -> root kind for the ranks at the end of the waiting."""
    nodes = set(graph.edges) | {t for ts in graph.edges.values() for t in ts}
    comp = _components(graph.edges, nodes)
    rings: dict[int, set[int]] = defaultdict(set)
    for n, c in comp.items():
        rings[c].add(n)
    stalled = {s.rank for s in graph.stalls}
    # a sink: waits for nobody; a cycle: a set of ranks waiting for each other with no edge leaving it
    sinks = {n for n in nodes if not graph.edges.get(n)}
    cyclic: set[int] = set()
    for ring in rings.values():
        closed = len(ring) > 1 and all(t in ring for n in ring for t in graph.edges.get(n, {}))
        if closed and _collective_in_cycle(graph, ring):
            cyclic |= ring
    graph.cycles = [sorted(n for n in r if n > HUB_FLOOR) for r in rings.values() if r <= cyclic]
    cyclic = {n for n in cyclic if n > HUB_FLOOR}
    kinds: dict[int, str] = {}
    for n in sinks:
        kinds[n] = "no dump" if n in no_dump else "stalled" if n in stalled else "missing"
    for n in stalled - set(kinds):
        kinds[n] = "stalled"  # it also waits for someone, but its own device stopped first
    for n in cyclic - set(kinds):
        kinds[n] = "cycle"
    return kinds


def build(blocked: list[Blocked], stalls: list[Stall], elsewhere: Elsewhere | None = None) -> WaitGraph:
    """Edges from every stuck collective with absent members (and from `elsewhere`: stacks, errors, silent
    ranks; docs/internals/analyzers.md), then the roots and what each holds up."""
    graph = WaitGraph(blocked=list(blocked), stalls=stalls)
    other = elsewhere or Elsewhere()
    for index, b in enumerate(blocked):
        if len(b.entered) > 1 and len(b.absent) > 1:
            hub = HUB_FLOOR - 1 - index
            for waiter in b.entered:
                _edge(graph, waiter, hub, b)
            for target in b.absent:
                _edge(graph, hub, target, b)
            continue
        for waiter in b.entered:
            for target in b.absent:
                _edge(graph, waiter, target, b)
    silent = set(other.silent)
    graph.silent = tuple(sorted(silent))
    graph.at = dict(other.at)
    for rank, message in sorted(other.lost_peer.items()):
        for target in sorted(silent):
            _edge(graph, rank, target, Blocked("", "", -1, message[:80], "", (rank,), (), (target,), -1, "lost peer"))
    no_dump = {r for b in blocked for r in b.no_dump} | silent
    kinds = _kinds(graph, no_dump)
    blocked_elsewhere = {r: f"waits in {w}" for r, w in other.waits_in.items()}
    blocked_elsewhere.update({r: f"lost its peer: {m}" for r, m in other.lost_peer.items()})
    demoted = {r for r, k in kinds.items() if k == "missing" and r in blocked_elsewhere}
    if demoted:
        targets = sorted(r for r, k in kinds.items() if r not in demoted) or sorted(silent)
        for rank in sorted(demoted):
            for target in targets:
                _edge(graph, rank, target, Blocked("", "", -1, blocked_elsewhere[rank][:80], "", (rank,), (target,),
                                                   (), -1, "stack" if rank in other.waits_in else "lost peer"))
        kinds = _kinds(graph, no_dump)
    graph.roots = _roots(graph, kinds)
    if not graph.roots:
        stuck = [b for b in blocked if not b.absent]
        if stuck:
            ranks = tuple(sorted({r for b in stuck for r in b.entered}))
            graph.roots = [Root(ranks, "stuck collective", {}, (), tuple(stuck))]
    return graph


def _collective_in_cycle(graph: WaitGraph, ring: set[int]) -> bool:
    """A closed set of ranks waiting for each other counts as a cycle only when a collective is one of its
    edges: a send and its recv both pending (one peer each way) is a pair stuck behind something else."""
    return any(b.source != "p2p" for a in ring for t, via in graph.edges.get(a, {}).items() if t in ring for b in via)


def _key(graph: WaitGraph, rank: int, kind: str) -> tuple[str, str]:
    """Ranks that stopped together share a key: their kind and the collective they stopped at."""
    if kind == "stalled":
        first = min((s for s in graph.stalls if s.rank == rank), key=lambda s: (s.desc, s.completed))
        return kind, f"{first.desc or first.pg}#{first.completed}"
    if kind == "cycle":
        return kind, ",".join(str(r) for r in next((c for c in graph.cycles if rank in c), [rank]))
    return kind, ""


def _roots(graph: WaitGraph, kinds: dict[int, str]) -> list[Root]:
    together: dict[tuple[str, str], list[int]] = defaultdict(list)
    for rank, kind in sorted(kinds.items()):
        together[_key(graph, rank, kind)].append(rank)
    roots = []
    index = _blocked_by_rank(graph)
    for (kind, _), ranks in together.items():
        mine = set(ranks)
        behind = tuple(sorted(_behind(graph.edges, mine)))
        later = set(behind)
        held = tuple(b for b in graph.blocked if not b.absent_set.isdisjoint(mine) or not later.isdisjoint(b.entered))
        last = {r: last_did(r, index) for r in ranks[:MAX_LAST]}
        roots.append(Root(tuple(ranks), kind, last, behind, held,
                          tuple(s for s in graph.stalls if s.rank in mine)))
    order = {"stalled": 0, "no dump": 1, "missing": 2, "cycle": 3}
    return sorted(roots, key=lambda r: (-len(r.behind), order.get(r.kind, 9), r.ranks))


def _blocked_by_rank(graph: WaitGraph) -> tuple[dict[int, list[Blocked]], dict[int, list[Blocked]]]:
    """rank -> the stuck collectives it entered, and those it is absent from (in `graph.blocked`'s order):
    one pass, linear in the members."""
    entered: dict[int, list[Blocked]] = defaultdict(list)
    absent: dict[int, list[Blocked]] = defaultdict(list)
    for b in graph.blocked:
        for r in b.entered:
            entered[r].append(b)
        for r in b.absent_set:
            absent[r].append(b)
    return entered, absent


def last_did(rank: int, index: tuple[dict[int, list[Blocked]], dict[int, list[Blocked]]]) -> str:
    """What a rank last did, as far as the stuck collectives tell: the latest one it entered, or where it is
    missing (`index`: `_blocked_by_rank`, built once for many ranks)."""
    entered, missing = index[0].get(rank, []), index[1].get(rank, [])
    parts = []
    if missing:
        parts.append("never entered " + ", ".join(b.label for b in missing[:3]) + ("..." if len(missing) > 3 else ""))
    if entered:
        parts.append("waits in " + ", ".join(b.label for b in entered[:2]) + ("..." if len(entered) > 2 else ""))
    return "; ".join(parts)


def wait_graph(store: Store, world: int) -> WaitGraph:
    """The wait-for graph of a hung or failed job from its flight-recorder dumps and watchdog timeouts."""
    blocked, stalls, dumped = fr_blocked(store, world)
    blocked = [*blocked, *p2p_blocked(store, world)]
    if not blocked:
        return WaitGraph()
    return build(blocked, stalls, other_sources(store, world, dumped))
