"""Pick up the NCCL inputs of a run directory or a folder of logs, for `perftracker analyze`.

Promise: `load_nccl_inputs(paths)` takes the non-trace files `rundir.discover` found, keeps the
NCCL logs (content sniff) and `env/rank-<r>.json` snapshots, and returns the `nccl` and `config`
tables, load notes, and the meta entries the `nccl_config` analyzer reads (`nccl_profile`, and
`sysfs` only when a sysfs root is given: a log folder copied from a cluster says nothing about the
machine analysing it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.collectors.counters.sysfs import read_sysfs
from perftracker.collectors.env import load_env_snapshots
from perftracker.collectors.nccl.log import load_nccl_logs, looks_like_nccl_log
from perftracker.collectors.nccl.profiles import load_profile
from perftracker.store import LoadNote
from perftracker.store.schema import conform

_ENV_SNAPSHOT = re.compile(r"rank[-_]?\d+\.json$")


def load_nccl_inputs(paths: Sequence[Path], profile: str | Path | None = None,
                     sysfs_root: Path | None = None) -> tuple[dict[str, pd.DataFrame], list[LoadNote], dict[str, Any]]:
    """(tables {"nccl", "config"}, notes, meta) for the NCCL part of an analysis."""
    logs = [p for p in paths if not p.name.endswith((".json", ".json.gz", ".parquet")) and looks_like_nccl_log(p)]
    envs = [p for p in paths if p.parent.name == "env" and _ENV_SNAPSHOT.search(p.name)]
    frames, notes = load_nccl_logs(logs)
    env_frame, env_notes = load_env_snapshots(envs)
    notes.extend(env_notes)
    frames["config"] = conform("config", pd.concat([env_frame, frames["config"]], ignore_index=True))
    meta: dict[str, Any] = {"nccl_profile": load_profile(profile)}
    if sysfs_root is not None:
        meta["sysfs"] = [read_sysfs(sysfs_root)]
    return frames, notes, meta
