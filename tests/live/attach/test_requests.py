"""Stack dumps on demand while attached: SIGUSR1 to attach, or a file in the (shared) run directory."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from perftracker.live.attach.discovery import Job
from perftracker.live.sampler import LiveContext
from perftracker.live.session import RequestWatcher


def test_new_or_touched_request_files_and_sigusr1_ask_for_a_dump(tmp_path: Path) -> None:
    # GIVEN a run directory that already holds an old request file when attach starts
    ctx = LiveContext(run_dir=tmp_path, job=Job([]), host="h")
    (tmp_path / "requests").mkdir()
    old = tmp_path / "requests" / "stacks"
    old.write_text("")
    before = signal.getsignal(signal.SIGUSR1)
    watcher = RequestWatcher(ctx)
    try:
        # WHEN nothing new happens THEN no request
        watcher.poll()
        assert not ctx.progress.hang_requested
        # WHEN the old file is touched again THEN that is a request, named by the file's time
        stamp = time.time() + 5
        os.utime(old, (stamp, stamp))
        watcher.poll()
        assert ctx.progress.hang_requested and abs(ctx.progress.requested_at - stamp) < 1e-3
        # WHEN another host's user creates a new request file THEN another request
        ctx.progress.hang_requested = False
        (tmp_path / "requests" / "stacks-2").write_text("")
        watcher.poll()
        assert ctx.progress.hang_requested
        # WHEN a trace request (another kind of file) appears THEN it is not a stack request
        ctx.progress.hang_requested = False
        (tmp_path / "requests" / "trace-1.json").write_text("{}")
        watcher.poll()
        assert not ctx.progress.hang_requested
        # WHEN attach gets SIGUSR1 THEN a request for now
        os.kill(os.getpid(), signal.SIGUSR1)
        assert ctx.progress.hang_requested and ctx.progress.requested_at == 0.0
    finally:
        watcher.close()
    # AND afterwards SIGUSR1 has its previous meaning again
    assert signal.getsignal(signal.SIGUSR1) == before
