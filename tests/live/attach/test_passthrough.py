"""The output copier of `perftracker run` drains the job's pipe whatever happens to its own writing: a copy
on a full device stops while the output passes through; a reader that went away and a copy that cannot
be opened still leave the job's pipe drained to its end (the job is never blocked on it)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from perftracker.live.attach.passthrough import OutputCopier

MEGABYTE = b"".join(b"line %06d %s\n" % (i, b"x" * 50) for i in range(16000))


def _feed(fd: int) -> threading.Thread:
    """Write MEGABYTE into the pipe `fd` (as a job would), then close it."""
    def write() -> None:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(MEGABYTE)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_copy_on_a_full_device_stops_and_the_output_passes_through_whole() -> None:
    # GIVEN a job's pipe carrying 1 MB, our output a pipe we read, and the copy on a device that is always full
    job_read, job_write = os.pipe()
    ours_read, ours_write = os.pipe()
    copier = OutputCopier("stdout", os.fdopen(job_read, "rb"), ours_write, Path("/dev/full")).start()
    job = _feed(job_write)
    # WHEN everything the job wrote is read from our side
    with os.fdopen(ours_read, "rb") as ours:
        received = b""
        while len(received) < len(MEGABYTE):
            chunk = ours.read1(65536)
            if not chunk:
                break
            received += chunk
    job.join(timeout=30)
    copier.join(timeout=30)
    os.close(ours_write)
    # THEN the whole output passed through, in order, and the copy's failure is said with its file and reason
    assert received == MEGABYTE and not job.is_alive()
    assert copier.problem().startswith("the copy of the job's stdout (/dev/full) stopped at 0 bytes (No space left")


def test_a_reader_gone_and_a_copy_that_cannot_be_opened_still_drain_the_job(tmp_path: Path) -> None:
    # GIVEN nobody reading our output any more, and a copy under a path where a file stands in the way
    (tmp_path / "file").write_text("not a folder")
    job_read, job_write = os.pipe()
    ours_read, ours_write = os.pipe()
    os.close(ours_read)
    copier = OutputCopier("stderr", os.fdopen(job_read, "rb"), ours_write, tmp_path / "file" / "copy.log").start()
    # WHEN the job writes 1 MB (16 times what a pipe holds)
    job = _feed(job_write)
    job.join(timeout=30)
    copier.join(timeout=30)
    os.close(ours_write)
    # THEN the job was never blocked: its pipe was drained to the end, and the missing copy is said
    assert not job.is_alive() and not copier.thread.is_alive()
    assert copier.lost_passthrough_bytes == len(MEGABYTE)
    assert f"({tmp_path / 'file' / 'copy.log'}) stopped at 0 bytes (File exists)" in copier.problem()
