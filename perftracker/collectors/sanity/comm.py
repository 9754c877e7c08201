"""Communication figures for `perftracker sanity`, over the ranks of the job it was launched as.

Promise:
- `Launch.from_env(env)` reads the rank, world size and local rank the launcher gave (torchrun, Slurm, Open MPI,
  MPICH, PMIx: launcher_env.py) and the rendezvous address (MASTER_ADDR / MASTER_PORT); one process alone
  when no launcher set a world size.
- `Comm.start(launch, backend, timeout_s)` joins the process group (gloo on CPU, NCCL on GPU) with `timeout_s`
  on every collective, publishes this rank's host, and learns every rank's host through the group's store.
- `collectives(...)` measures all-reduce latency (one element) and all-reduce / all-gather bus bandwidth
  (nccl-tests' definitions: busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for all-gather) over all ranks;
  with `scope="node"` over this node's ranks only (every node at once: NVLink / PCIe / shared memory within a
  node), with `scope="inter"` over the first rank of each node (the NICs between nodes), each figure named with
  its scope's prefix (`node_`, `inter_`). Those groups exist only where they differ from the whole job: a node
  with two or more ranks; two or more nodes of which one has two or more ranks.
- `pairwise(...)`: the first rank of each node (its *leader*) meets every other node's leader once, in the
  N-1 rounds (N even; N with one node resting per round when odd) of a round-robin tournament, and times a
  ping-pong of `size` bytes; the lower-ranked leader records the pair's bandwidth (2*size / round trip).
  Every wait has a timeout and every message a tag of its round, so a dead or slow peer costs one timeout and
  never shifts later messages.
- `post(result)` / `gather(world, deadline)`: each rank leaves its result (JSON) in the store; rank 0 collects
  what arrived by `deadline` (a rank absent then is unreachable) and says so (`mark_gathered`). A failure is
  recorded in `errors`, never raised: a node that died mid-test must not stop the others from reporting.
- `fallback_gather(own, deadline)`: on a rank other than 0 that saw no `mark_gathered` by `deadline`, the
  results to write when rank 0 is gone: through the store when it still answers (the lowest rank that posted
  writes: it gets every posted result), else (the store lived with rank 0's node) over a gloo group of the
  ranks on the other nodes, made at the start (its connections outlive the store), whose lowest rank writes. Returns the results on the writer,
  None elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from perftracker.errors import UsageError
from perftracker.launcher_env import LOCAL_RANK_VARS, RANK_VARS, WORLD_VARS, first_int

KEY = "perftracker-sanity"
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # the newer name, where torch has it


@dataclass(frozen=True)
class Launch:
    """Where this process stands in the job."""

    rank: int
    world: int
    local_rank: int
    master_addr: str = ""
    master_port: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Launch:
        world = first_int(env, WORLD_VARS) or 1
        rank = first_int(env, RANK_VARS) or 0
        local = first_int(env, LOCAL_RANK_VARS) or 0
        if rank >= world:
            raise UsageError(f"rank {rank} is not below the world size {world} the launcher set",
                             "check the launcher's rank variables (RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK)")
        addr = env.get("MASTER_ADDR", "").strip()
        port = first_int(env, ("MASTER_PORT",)) or 0
        if world > 1 and (not addr or not port):
            raise UsageError(f"rank {rank} of {world}: MASTER_ADDR and MASTER_PORT are not set",
                             "launch with torchrun, or export MASTER_ADDR (the first node) and MASTER_PORT under "
                             "srun / mpirun")
        return cls(rank, world, local, addr, port)


@dataclass
class PairFigure:
    """One pair of nodes' ping-pong: bandwidth in GB/s and round trip in ms, or why it failed."""

    a: str
    b: str
    gbps: float | None = None
    rtt_ms: float | None = None
    error: str = ""


@dataclass
class CommFigures:
    """The collectives' figures this rank measured and the pairs it recorded."""

    figures: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    pairs: list[PairFigure] = field(default_factory=list)


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """The rounds of a round-robin tournament over n players (circle method): every pair meets exactly once,
    in n-1 rounds for even n and n rounds for odd n (one player rests each round)."""
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
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

    def _timed(self, fn: Any, iters: int) -> list[float]:
        self._wait(fn())  # warm-up (connections, buffers)
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self._wait(fn())
            out.append(time.perf_counter() - t0)
        return out

    def collectives(self, size: int, iters: int, latency_iters: int, scope: str = "") -> CommFigures:
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
                durations = self._timed(fn, count)
            except (RuntimeError, ValueError) as exc:  # a peer died or hung past the timeout
                result.errors[prefix + name] = _why(exc)
                break  # the group is broken: later collectives would only wait out the timeout again
            t = statistics.median(durations)
            nbytes = big.numel() * 4 if name.startswith("allreduce_busbw") else gathered.numel() * 4
            result.figures[prefix + name] = t * 1e6 if factor == 0.0 else nbytes / t / 1e9 * factor
        return result

    def pairwise(self, size: int, reps: int, tours: int = 3) -> list[PairFigure]:
        """This leader's pairs (see the module); [] for ranks that lead no node. The tournament is played
        `tours` times; a pair's figure is the median over tours of each tour's median round trip (a burst of
        load during one round moves it little)."""
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
                                           (tour * len(schedule) + rnd) * 1000, pair)
                    if rtts:
                        tour_rtts.setdefault((a, b), []).append(statistics.median(rtts))
        out = []
        for key, pair in mine.items():
            if key[0] != idx:
                continue
            if key in tour_rtts:
                rtt = statistics.median(tour_rtts[key])
                pair.rtt_ms, pair.gbps = rtt * 1e3, 2.0 * size / rtt / 1e9
            out.append(pair)
        return out

    def _ping_pong(self, peer: int, first: bool, buf_out: torch.Tensor, buf_in: torch.Tensor, reps: int,
                   base_tag: int, pair: PairFigure) -> list[float]:
        rtts = []
        try:
            for rep in range(reps + 1):
                tag = (base_tag + rep) * 2
                t0 = time.perf_counter()
                if first:
                    self._wait(dist.isend(buf_out, peer, tag=tag))
                    self._wait(dist.irecv(buf_in, peer, tag=tag + 1))
                else:
                    self._wait(dist.irecv(buf_in, peer, tag=tag))
                    self._wait(dist.isend(buf_out, peer, tag=tag + 1))
                if rep:  # the first is the warm-up
                    rtts.append(time.perf_counter() - t0)
        except (RuntimeError, ValueError) as exc:
            pair.error = _why(exc)
        return rtts

    def post(self, result: Mapping[str, Any]) -> bool:
        """Leave this rank's result for rank 0 (a no-op alone); False when the store no longer answers."""
        if self.store is None:
            return True
        try:
            self.store.set(f"{KEY}/result/{self.launch.rank}", json.dumps(result))
        except (RuntimeError, ValueError):  # the store lived with a node that died
            return False
        return True

    def gather(self, own: Mapping[str, Any], deadline: float) -> dict[int, dict[str, Any]]:
        """Every rank's result that arrived by `deadline` (time.monotonic()), this rank's own included."""
        got: dict[int, dict[str, Any]] = {self.launch.rank: dict(own)}
        missing = [r for r in range(self.launch.world) if r not in got]
        while missing and self.store is not None:
            for r in list(missing):
                try:
                    if self.store.check([f"{KEY}/result/{r}"]):
                        got[r] = json.loads(self.store.get(f"{KEY}/result/{r}"))
                        missing.remove(r)
                except (RuntimeError, ValueError):
                    continue
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        return got

    def mark_gathered(self) -> None:
        """Rank 0: say that it gathered (the other ranks stop waiting for it)."""
        if self.store is not None:
            with contextlib.suppress(RuntimeError, ValueError):
                self.store.set(f"{KEY}/gathered", "1")

    def _rank0_gathered(self, deadline: float) -> bool | None:
        """True once rank 0 said it gathered, False when the store answers but rank 0 did not by `deadline`,
        None when the store no longer answers."""
        while True:
            try:
                if self.store.check([f"{KEY}/gathered"]):
                    return True
            except (RuntimeError, ValueError):
                return None
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def fallback_gather(self, own: Mapping[str, Any], deadline: float) -> dict[int, dict[str, Any]] | None:
        """See the module docstring: the results to write on the rank that writes in rank 0's place, else None."""
        if self.store is None or self.launch.rank == 0:
            return None
        state = self._rank0_gathered(deadline)
        if state is True:
            return None
        me = self.launch.rank
        if state is False:  # rank 0 is gone, its store is not: the lowest rank that posted writes
            try:
                posted = [r for r in range(1, self.launch.world) if self.store.check([f"{KEY}/result/{r}"])]
            except (RuntimeError, ValueError):
                return None
            return self.gather(own, time.monotonic()) if posted and posted[0] == me else None
        group = self.groups.get("others")
        others = [r for r in range(self.launch.world) if self.hosts[r] != self.hosts[0]]
        if group is None:  # alone off rank 0's node, or on it (its ranks are presumed gone with it)
            return {me: dict(own)} if others == [me] else None
        dst = min(others)
        out: list[Any] | None = [None] * len(others) if me == dst else None
        try:
            dist.gather_object(dict(own), out, dst=dst, group=group)
        except (RuntimeError, ValueError):  # another node died too: nobody can say it has every result
            return None
        return {int(r["rank"]): r for r in out if isinstance(r, dict)} if out is not None else None

    def close(self, clean: bool) -> None:
        """Leave the group when every step went well (no collective goodbye: a dead peer would make it hang;
        rank 0 leaves only after `gather`, so the store it may host outlives every `post`)."""
        if dist.is_initialized() and clean:
            try:
                dist.destroy_process_group()
            except (RuntimeError, ValueError):
                pass
