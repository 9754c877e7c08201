"""Pick up the NCCL inputs of a run directory or a folder of logs, for `perftracker analyze`.

Promise: `load_nccl_inputs(paths)` keeps the NCCL logs (by content) and `env/rank-<r>.json` snapshots among
`paths` and returns the `nccl` and `config` tables, notes, and the RunInfo fields `nccl_config` reads
(`nccl_profile`; `sysfs` only when a sysfs root is given, its entry naming `sysfs_host`); `process_groups(nccl)`
gives the communicators the logs name (commId) as the job's process groups. Rules: docs/internals/collectors.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perftracker.collectors.counters.sysfs import read_sysfs
from perftracker.collectors.env import load_env_snapshots
from perftracker.collectors.nccl.log import load_nccl_logs, looks_like_nccl_log
from perftracker.collectors.nccl.profiles import load_profile
from perftracker.store import LoadNote, RunInfo
from perftracker.store.run_info import ProcessGroup
from perftracker.store.schema import conform

_ENV_SNAPSHOT = re.compile(r"rank[-_]?\d+\.json$")


def load_nccl_inputs(paths: Sequence[Path], profile: str | Path | None = None, sysfs_root: Path | None = None,
                     sysfs_host: str = "") -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """(tables {"nccl", "config"}, notes, RunInfo {nccl_profile, sysfs}) for the NCCL part of an analysis."""
    logs = [p for p in paths if not p.name.endswith((".json", ".json.gz", ".parquet")) and looks_like_nccl_log(p)]
    envs = [p for p in paths if p.parent.name == "env" and _ENV_SNAPSHOT.search(p.name)]
    frames, notes = load_nccl_logs(logs)
    env_frame, env_notes = load_env_snapshots(envs)
    notes.extend(env_notes)
    frames["config"] = conform("config", pd.concat([env_frame, frames["config"]], ignore_index=True))
    sysfs = [read_sysfs(sysfs_root, host=sysfs_host)] if sysfs_root is not None else []
    return frames, notes, RunInfo(nccl_profile=load_profile(profile), sysfs=sysfs)


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
