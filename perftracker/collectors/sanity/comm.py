"""Communication figures for `perftracker sanity`, over the ranks of the job it was launched as.

Promise: `Comm.start(launch, backend, timeout_s)` joins the process group; `barrier`, `collectives` (all-reduce
latency, all-reduce / all-gather bus bandwidth over the job, a node or between nodes) and `pairwise` (node
pairs) end by their deadline on every member alike, what was cut listed. See docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from perftracker.collectors.sanity.launch import Launch

KEY = "perftracker-sanity"
_GO, _LAST, _SKIP = 1.0, 0.0, -1.0  # a ping-pong message's first element: what follows it
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # the newer name, where torch has it


@dataclass
class PairFigure:
    """One pair of nodes' ping-pong: bandwidth in GB/s and round trip in ms, or why it failed."""

    a: str
    b: str
    gbps: float | None = None
    rtt_ms: float | None = None
    error: str = ""
    cut: bool = False  # never measured: the phase's deadline passed first (not a failure)
    tours_gbps: list[float] = field(default_factory=list)


@dataclass
class CommFigures:
    """The collectives' figures this rank measured and the pairs it recorded."""

    figures: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    cut: list[str] = field(default_factory=list)


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """The rounds of a round-robin tournament over n players (circle method): every pair meets exactly once,
    in n-1 rounds for even n and n rounds for odd n (one player rests each round)."""
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        matches = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in matches if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


class Comm:
    """This rank's membership of the job's process group (or of none, alone)."""

    def __init__(self, launch: Launch, device: torch.device, timeout_s: float) -> None:
        self.launch = launch
        self.device = device
        self.timeout = timedelta(seconds=timeout_s)
        self.joined_at = time.monotonic()
        self.hosts: list[str] = []
        self.store: Any = None
        self.groups: dict[str, Any] = {}  # "node", "inter", "others" -> this rank's process group, where it is one

    @classmethod
    def start(cls, launch: Launch, device: torch.device, host: str, timeout_s: float, join_s: float) -> Comm:
        """Join the group (waiting up to `join_s` for every rank: nodes start at different times) and learn every
        rank's host; every later wait is bounded by `timeout_s`."""
        comm = cls(launch, device, timeout_s)
        join = timedelta(seconds=join_s)
        if launch.world == 1:
            comm.hosts = [host]
            return comm
        backend = "nccl" if device.type == "cuda" else "gloo"
        os.environ.setdefault("MASTER_ADDR", launch.master_addr)
        os.environ.setdefault("MASTER_PORT", str(launch.master_port))
        dist.init_process_group(backend, init_method="env://", rank=launch.rank, world_size=launch.world,
                                timeout=join)
        comm.store = dist.distributed_c10d._get_default_store()
        comm.store.set(f"{KEY}/host/{launch.rank}", host)
        keys = [f"{KEY}/host/{r}" for r in range(launch.world)]
        comm.store.wait(keys, join)
        comm.hosts = [comm.store.get(k).decode("utf-8", "replace") for k in keys]
        comm._make_groups()
        comm.store.set_timeout(comm.timeout)
        comm.joined_at = time.monotonic()
        return comm

    def _make_groups(self) -> None:
        """This rank's node group, the group of the nodes' first ranks and the ranks off rank 0's node (for
        `fallback_gather`), each where it differs from the whole job. Every rank makes every group, in the same
        order (torch names a group by the order it was made in: a rank that skipped one would wait forever)."""
        me, n = self.launch.rank, self.launch.world
        leaders = self.leaders()
        wanted: list[tuple[str, list[int]]] = []
        for host in self.nodes:
            mine = [r for r in range(n) if self.hosts[r] == host]
            if len(mine) > 1:
                wanted.append(("node", mine))
        if 1 < len(leaders) < n:
            wanted.append(("inter", leaders))
        others = [r for r in range(n) if self.hosts[r] != self.hosts[0]]
        if len(others) > 1:
            wanted.append(("others", others))
        made: dict[tuple[int, ...], Any] = {}  # one group per set of ranks
        for name, ranks in wanted:
            key = tuple(ranks)
            if key not in made:
                made[key] = dist.new_group(ranks, timeout=self.timeout)
            if me in ranks:
                self.groups[name] = made[key]

    @property
    def nodes(self) -> list[str]:
        """Every node (host) in order of its first rank."""
        return list(dict.fromkeys(self.hosts))

    def leaders(self) -> list[int]:
        """The first rank of each node, in node order."""
        return [self.hosts.index(h) for h in self.nodes]

    def _wait(self, work: Any) -> None:
        if self.device.type == "cuda":
            work.wait()
            torch.cuda.synchronize(self.device)
        else:
            work.wait(self.timeout)

    def barrier(self, scope: str = "") -> str:
        """Wait until every member of `scope`'s group (all ranks by default) arrives; '' or why it failed."""
        group = self.groups.get(scope) if scope else None
        if self.launch.world < 2 or (scope and group is None):
            return ""
        try:
            self._wait(dist.barrier(group=group, async_op=True))
        except (RuntimeError, ValueError) as exc:
            return _why(exc)
        return ""

    def _agreed_count(self, warm_s: float, iters: int, deadline: float, group: Any) -> int:
        """The iterations every member of `group` runs: as many of `iters` as fit before `deadline` at the slowest
        member's warm-up pace, with the least time left of any member (one small all-reduce: all agree)."""
        both = torch.tensor([warm_s, -(deadline - time.monotonic())], dtype=torch.float32, device=self.device)
        self._wait(dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group, async_op=True))
        slowest, left = float(both[0]), -float(both[1])
        return max(0, min(iters, int(left / max(slowest, 1e-6))))

    def _timed(self, fn: Any, iters: int, deadline: float, group: Any) -> list[float]:
        t0 = time.perf_counter()
        self._wait(fn())  # warm-up (connections, buffers)
        count = self._agreed_count(time.perf_counter() - t0, iters, deadline, group)
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            self._wait(fn())
            out.append(time.perf_counter() - t0)
        return out

    def collectives(self, size: int, iters: int, latency_iters: int, scope: str = "",
                    deadline: float = float("inf")) -> CommFigures:
        """All-reduce latency and all-reduce / all-gather bus bandwidth over all ranks, or over `scope`'s group
        (see the module); nothing where this rank has no such group."""
        result = CommFigures()
        group = self.groups.get(scope) if scope else None
        if scope and group is None:
            return result
        n = dist.get_world_size(group) if scope else self.launch.world
        if n < 2:
            return result
        prefix = f"{scope}_" if scope else ""
        dev = self.device
        one = torch.ones(1, device=dev)
        big = torch.ones(size // 4, device=dev)
        part = torch.ones(size // 4 // n, device=dev)
        gathered = torch.empty(part.numel() * n, device=dev)
        steps: list[tuple[str, Any, int, float]] = [
            ("allreduce_lat_us", lambda: dist.all_reduce(one, group=group, async_op=True), latency_iters, 0.0),
            ("allreduce_busbw_gbps", lambda: dist.all_reduce(big, group=group, async_op=True), iters,
             2.0 * (n - 1) / n),
            ("allgather_busbw_gbps", lambda: _ALL_GATHER(gathered, part, group=group, async_op=True), iters,
             (n - 1) / n),
        ]
        for name, fn, count, factor in steps:
            try:
                durations = self._timed(fn, count, deadline, group)
            except (RuntimeError, ValueError) as exc:  # a peer died or hung past the timeout
                result.errors[prefix + name] = _why(exc)
                break  # the group is broken: later collectives would only wait out the timeout again
            if len(durations) < count:
                result.cut.append(f"{prefix}{name}: {len(durations)} of {count} iterations (time box)")
            if not durations:
                continue
            t = min(durations) if factor == 0.0 else statistics.median(durations)
            nbytes = big.numel() * 4 if name.startswith("allreduce_busbw") else gathered.numel() * 4
            result.figures[prefix + name] = t * 1e6 if factor == 0.0 else nbytes / t / 1e9 * factor
        return result

    def pairwise(self, size: int, reps: int, tours: int = 3, deadline: float = float("inf")) -> list[PairFigure]:
        """This leader's pairs (see the module); [] for ranks that lead no node. The tournament is played
        `tours` times; a pair's figure is the best of the tours' median round trips (a burst of load during one
        tour moves it little; a shaped or degraded link is slow in every tour)."""
        leaders = self.leaders()
        me = self.launch.rank
        if me not in leaders or len(leaders) < 2:
            return []
        idx = leaders.index(me)
        buf_out = torch.ones(size // 4, device=self.device)
        buf_in = torch.empty_like(buf_out)
        mine: dict[tuple[int, int], PairFigure] = {}
        tour_rtts: dict[tuple[int, int], list[float]] = {}
        schedule = round_robin(len(leaders))
        for tour in range(tours):
            for rnd, matches in enumerate(schedule):
                for a, b in matches:
                    if idx not in (a, b):
                        continue
                    pair = mine.setdefault((a, b), PairFigure(self.hosts[leaders[a]], self.hosts[leaders[b]]))
                    if pair.error:
                        continue  # the peer failed once: do not wait out its timeout again
                    rtts = self._ping_pong(leaders[b if idx == a else a], idx == a, buf_out, buf_in, reps,
                                           (tour * len(schedule) + rnd) * 1000, pair, deadline)
                    if rtts:
                        tour_rtts.setdefault((a, b), []).append(statistics.median(rtts))
        out = []
        for key, pair in mine.items():
            if key[0] != idx:
                continue
            if key in tour_rtts:
                rtt = min(tour_rtts[key])
                pair.rtt_ms, pair.gbps = rtt * 1e3, 2.0 * size / rtt / 1e9
                pair.tours_gbps = [round(2.0 * size / t / 1e9, 6) for t in tour_rtts[key]]
                pair.cut = False
            out.append(pair)
        return out

    def _ping_pong(self, peer: int, first: bool, buf_out: torch.Tensor, buf_in: torch.Tensor, reps: int,
                   base_tag: int, pair: PairFigure, deadline: float) -> list[float]:
        """One match: the initiator (`first`) marks each message GO (another round trip follows), LAST (the
        responder answers, then both stop) or SKIP (past the deadline before the match began: no answer)."""
        rtts: list[float] = []
        try:
            for rep in range(reps + 1):
                tag = (base_tag + rep) * 2
                t0 = time.perf_counter()
                if first:
                    late = time.monotonic() >= deadline
                    flag = _SKIP if late and rep == 0 else _LAST if late or rep == reps else _GO
                    buf_out[0] = flag
                    self._wait(dist.isend(buf_out, peer, tag=tag))
                    if flag == _SKIP:
                        pair.cut = True
                        break
                    self._wait(dist.irecv(buf_in, peer, tag=tag + 1))
                else:
                    self._wait(dist.irecv(buf_in, peer, tag=tag))
                    flag = float(buf_in[0])
                    if flag == _SKIP:
                        pair.cut = True
                        break
                    self._wait(dist.isend(buf_out, peer, tag=tag + 1))
                if rep:  # the first is the warm-up
                    rtts.append(time.perf_counter() - t0)
                if flag == _LAST:
                    break
        except (RuntimeError, ValueError) as exc:
            pair.error = _why(exc)
        return rtts

    def close(self, clean: bool) -> None:
        """Leave the group when every step went well (no collective goodbye: a dead peer would make it hang;
        rank 0 leaves only after `gather`, so the store it may host outlives every `post`)."""
        if dist.is_initialized() and clean:
            try:
                dist.destroy_process_group()
            except (RuntimeError, ValueError):
                pass
