"""Pick up the NCCL inputs of a run directory or a folder of logs, for `perftracker analyze`.

Promise: `load_nccl_inputs(paths)` keeps the NCCL logs (by content) and `env/rank-<r>.json` snapshots among
`paths` and returns the `nccl` and `config` tables, notes, and the RunInfo fields `nccl_config` reads
(`nccl_profile`; `sysfs` only when a sysfs root is given, its entry naming `sysfs_host`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perftracker.collectors.counters.sysfs import read_sysfs
from perftracker.collectors.env import load_env_snapshots
from perftracker.collectors.nccl.log import load_nccl_logs, looks_like_nccl_log
from perftracker.collectors.nccl.profiles import load_profile
from perftracker.store import LoadNote, RunInfo
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
