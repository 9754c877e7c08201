"""Which worker installed the hook: the attach side's reading of `<spool>/ranks/rank-<r>.json`.

`hooked_by(spool, rank, pid)` is True only when that file names `pid` and was written after that process
started (less CLOCK_SLACK_S): pids repeat across runs in containers, so a pid alone is not enough.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil

CLOCK_SLACK_S = 2.0  # a process's start time is derived from the boot time, which /proc gives in whole seconds


def hooked_by(spool: Path, rank: int, pid: int) -> bool:
    try:
        info = json.loads((spool / "ranks" / f"rank-{rank}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("pid") != pid:
        return False
    installed_ns = info.get("installed_ns")
    if not isinstance(installed_ns, int):
        return True  # written by an older hook, without the time: the pid is all there is to go by
    try:
        started_s = psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return False
    return installed_ns / 1e9 >= started_s - CLOCK_SLACK_S
