"""The communicators an NCCL log names, as the job's process groups (`RunInfo.process_groups`).

Promise: `process_groups(nccl)` reads the `nccl` table's Init START / COMPLETE facts and returns one
`ProcessGroup` per commId (source "nccl_log"), with its ranks where the log tells them; communicators printed
without a commId cannot be told apart and are left out. Rules: docs/internals/collectors.md.
"""

from __future__ import annotations

import json

import pandas as pd

from perftracker.store.run_info import ProcessGroup


def process_groups(nccl: pd.DataFrame) -> dict[str, ProcessGroup]:
    """commId -> its ProcessGroup (see the module's promise)."""
    if nccl.empty:
        return {}
    inits = nccl[nccl["key"].isin(["init_start", "init_complete"])]
    sizes: dict[str, int] = {}
    members: dict[str, dict[int, int]] = {}  # commId -> comm rank -> global rank (-1 unknown)
    for value, rank in zip(inits["value"].astype(str), inits["rank"].astype(int)):
        try:
            fact = json.loads(value)
        except ValueError:
            continue
        comm_id = fact.get("comm_id") if isinstance(fact, dict) else None
        if not comm_id or not isinstance(fact.get("nranks"), int):
            continue
        sizes[comm_id] = fact["nranks"]
        members.setdefault(comm_id, {})[int(fact.get("rank", -1))] = rank
    world = max(sizes.values(), default=0)
    out: dict[str, ProcessGroup] = {}
    for comm_id, size in sizes.items():
        seen = members[comm_id]
        if size == world:
            ranks: tuple[int, ...] = tuple(range(size))
        elif len(seen) == size and all(g >= 0 for g in seen.values()):
            ranks = tuple(seen[r] for r in sorted(seen))
        else:
            ranks = ()
        out[comm_id] = ProcessGroup(name=comm_id, desc="", size=size, ranks=ranks, source="nccl_log")
    return out
