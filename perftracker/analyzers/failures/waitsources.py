"""Where each rank is, from the sources other than flight-recorder entries, for the wait-for graph.

`other_sources(store, world, dumped)` returns one `Elsewhere`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from perftracker.analyzers.failures.hang import chosen_states
from perftracker.store import Store
from perftracker.values import pg_ranks

LOST_CONNECTION = "Connection closed by peer|Connection reset by peer|Broken pipe"  # a peer's end is gone
LOST_PEER = re.compile(LOST_CONNECTION + "|remote worker crash", re.IGNORECASE)


@dataclass
class Elsewhere:
    waits_in: dict[int, str] = field(default_factory=dict)  # rank -> "send (job.py:84)": blocked in a call
    at: dict[int, str] = field(default_factory=dict)  # rank -> where its stack is, when not waiting
    lost_peer: dict[int, str] = field(default_factory=dict)  # rank -> its lost-peer error
    silent: tuple[int, ...] = ()  # ranks of the world that left nothing


def other_sources(store: Store, world: int, dumped: tuple[int, ...]) -> Elsewhere:
    out = Elsewhere()
    stacks = store["stacks"]
    if not stacks.empty:
        for rank, state in chosen_states(stacks).items():
            if state.waiting:
                out.waits_in[rank] = f"{state.collective} ({state.site})" if state.site else state.collective
            elif state.where not in ("", "?"):
                out.at[rank] = state.where
    fail = store["failures"]
    seen: set[int] = set()
    if not fail.empty:
        mine = fail[(fail["rank"] >= 0) & fail["kind"].isin(["exception", "exit", "timeout", "gloo_timeout"])]
        seen = {int(r) for r in mine["rank"]}
        for rank, message in zip(mine["rank"], mine["message"].astype(str)):
            if LOST_PEER.search(message):
                out.lost_peer.setdefault(int(rank), message[:200])
    known = set(dumped) | set(out.waits_in) | set(out.at) | seen
    if world > 0 and 2 * len(known & set(range(world))) >= world:
        out.silent = tuple(r for r in range(world) if r not in known)
    return out


def world_size(store: Store) -> int:
    """The job's world size as far as any input tells (group members, manifest, ranks seen, dumps)."""
    config = store.run_info.fr_pg_config
    sizes = [len(pg_ranks(config, pg)) for pg in config]
    manifest = store.run_info.manifest
    if isinstance(manifest.get("world_size"), int):
        sizes.append(int(manifest["world_size"]))
    if not store.ranks.empty:
        sizes.append(int(store.ranks["world_size"].max()))
    for name in ("failures", "collectives_fr", "stacks"):
        frame = store[name]
        if not frame.empty:
            sizes.append(int(frame["rank"].max()) + 1)
    if not store["stacks"].empty:
        sizes.append(int(store["stacks"]["world_size"].max()))
    dumped = [int(r) for r in store.run_info.fr_pg_status if r.isdigit()]
    if dumped:
        sizes.append(max(dumped) + 1)
    return max(sizes, default=0)
