"""Round three: `attach` to what is not a running rank. The probes: a zombie process, or a rank that exits as it
is read (exit 70, ZombieProcess); `pid:-5` and `pid:12abc` (exit 70, ValueError); a rank that starts 2,000 child
processes inheriting RANK=0 (all recorded as workers: `ps` listed 2,001 "rank 0" processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.errors import InputError
from perftracker.live.attach.discovery import find_job, list_jobs


@pytest.mark.parametrize("spec", ["pid:-5", "pid:12abc", "pid:", "pid:99999999999999999999"])
def test_a_pid_that_is_no_pid_is_a_usage_error(spec: str, tmp_path: Path) -> None:
    # WHEN attach is given a pid that is not a whole number from 1 THEN exit 2 naming it, nothing written
    result = CliRunner().invoke(app, ["attach", spec, "-o", str(tmp_path / "run"), "--duration", "1"])
    assert result.exit_code == 2, result.output
    assert "names no process id" in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()


def test_a_zombie_is_named_as_such(tmp_path: Path) -> None:
    # GIVEN a child that exited and was not reaped (a zombie), with RANK in its environment
    child = subprocess.Popen(["true"], env={**os.environ, "RANK": "0"})
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        # WHEN attached to THEN an InputError saying it exited (exit 2), not exit 70
        with pytest.raises(InputError, match="exited"):
            find_job(f"pid:{child.pid}", "h")
        result = CliRunner().invoke(app, ["attach", f"pid:{child.pid}", "-o", str(tmp_path / "run"), "--duration", "1"])
        assert result.exit_code == 2, result.output
    finally:
        child.wait()


def test_children_that_inherited_a_rank_are_not_workers() -> None:
    # GIVEN a "rank 0" process that started 300 children, each inheriting RANK=0 (a data loader's workers)
    script = "import subprocess, sys, time\nkids = [subprocess.Popen(['sleep', '60']) for _ in range(300)]\n" \
             "print('ready', flush=True)\ntime.sleep(60)\n"
    rank = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "RANK": "0", "WORLD_SIZE": "1"},
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"
        # WHEN the job is found by the rank's pid, and listed as `ps` does
        job = find_job(f"pid:{rank.pid}", "h")
        listed = [w for j in list_jobs("h") for w in j.workers if w.pid == rank.pid or w.parent == rank.pid]
        # THEN one worker: the rank itself, not its 300 children
        assert [w.pid for w in job.workers if w.pid == rank.pid or w.parent == rank.pid] == [rank.pid]
        assert [w.pid for w in listed] == [rank.pid]
    finally:
        os.killpg(rank.pid, signal.SIGKILL)
        rank.wait()
