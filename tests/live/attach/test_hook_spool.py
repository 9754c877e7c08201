"""Which worker installed the hook (live/samplers/steps_sampler.py `hooked_by`): the pid and the time it was written, so that a reused
spool's files from an earlier run (the same small pids in every container or PID namespace) are not this run's."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil

from perftracker.live.samplers.steps_sampler import hooked_by


def _rank_file(spool: Path, rank: int, info: dict[str, object]) -> None:
    (spool / "ranks").mkdir(parents=True, exist_ok=True)
    (spool / "ranks" / f"rank-{rank}.json").write_text(json.dumps(info))


def test_a_rank_file_counts_only_when_its_pid_installed_it_after_starting(tmp_path: Path) -> None:
    me = os.getpid()
    started_ns = int(psutil.Process(me).create_time() * 1e9)
    # GIVEN rank files: written by this process now; naming this pid but written 100 s before it started (an
    # earlier run's process with the same pid); naming another pid; an older hook's, without the time
    _rank_file(tmp_path, 0, {"rank": 0, "pid": me, "installed_ns": time.time_ns()})
    _rank_file(tmp_path, 1, {"rank": 1, "pid": me, "installed_ns": started_ns - 100 * 10**9})
    _rank_file(tmp_path, 2, {"rank": 2, "pid": me + 1, "installed_ns": time.time_ns()})
    _rank_file(tmp_path, 3, {"rank": 3, "pid": me})
    # THEN only the first and the last count; a missing or unreadable file does not
    assert [hooked_by(tmp_path, r, me) for r in range(4)] == [True, False, False, True]
    assert not hooked_by(tmp_path, 4, me)
    (tmp_path / "ranks" / "rank-5.json").write_text("{not json")
    assert not hooked_by(tmp_path, 5, me)
