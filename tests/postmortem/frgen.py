"""Builders of NCCL flight-recorder dumps as `_dump_fr_trace[_json]()` writes them (torch 2.x, version 2.x).

The NCCL backend cannot run here; the keys and values follow the gloo dumps of torch 2.13 (see
shared/reference/attach_mechanics.md section 3) with the NCCL states scheduled/started/completed.
"""

from __future__ import annotations

from typing import Any

T0 = 1_795_000_000_000_000_000


def entry(seq: int, op: str = "nccl:all_reduce", sizes: list[list[int]] | None = None, state: str = "completed",
          pg: str = "0", desc: str = "default_pg") -> dict[str, Any]:
    sizes = sizes if sizes is not None else [[25165824]]
    done = state == "completed"
    return {"record_id": seq - 1, "pg_id": int(pg) if pg.isdigit() else 0, "process_group": [pg, desc],
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": op,
            "time_created_ns": T0 + seq * 1_000_000, "input_sizes": sizes, "input_dtypes": ["Float"],
            "output_sizes": sizes, "output_dtypes": ["Float"], "state": state,
            "time_discovered_started_ns": T0 + seq * 1_000_000 + 10 if state != "scheduled" else 0,
            "time_discovered_completed_ns": T0 + seq * 1_000_000 + 500 if done else 0,
            "retired": done, "timeout_ms": 600000, "is_p2p": False, "thread_id": "1401", "thread_name": "python3"}


def dump(entries: list[dict[str, Any]], world: int = 4, enqueued: int = -1, completed: int = -1) -> dict[str, Any]:
    return {"version": "2.10", "comm_lib_version": "2.27.3",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
            "pg_status": {"0": {"last_enqueued_collective": enqueued, "last_started_collective": enqueued,
                                "last_completed_collective": completed}},
            "entries": entries}


def hang_dumps() -> dict[int, dict[str, Any]]:
    """Ranks 0, 1, 3 entered all_reduce #1234 and wait; rank 2 stopped after #1233."""
    out = {}
    for r in range(4):
        last = 1233 if r == 2 else 1234
        entries = [entry(s) for s in range(1229, 1234)]
        if last == 1234:
            entries.append(entry(1234, state="started"))
        out[r] = dump(entries, enqueued=last, completed=1233)
    return out


def mismatch_dumps() -> dict[int, dict[str, Any]]:
    """At #7 rank 1 broadcasts [[10]] while ranks 0, 2, 3 all-reduce [[1000]]; all wait there."""
    out = {}
    for r in range(4):
        entries = [entry(s, sizes=[[1000]]) for s in range(1, 7)]
        entries.append(entry(7, op="nccl:broadcast" if r == 1 else "nccl:all_reduce",
                             sizes=[[10]] if r == 1 else [[1000]], state="started"))
        out[r] = dump(entries, enqueued=7, completed=6)
    return out
