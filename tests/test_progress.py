"""Long commands say how far they are on a terminal, and print nothing extra when piped or quiet.

Promise checked: the loader reports (files parsed, files in all) as the map step goes, in order, ending
at all files, with one worker and with a process pool; `parsing_progress` gives no callback when stderr
is not a terminal or --quiet is given, and a real rich display on a (pseudo-)terminal.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from perftracker.cli.progress import parsing_progress
from perftracker.collectors.loading import LoadOptions, load_path

RUN = Path(__file__).resolve().parent / "fixtures" / "accuracy" / "clean-repro-a"


@pytest.mark.parametrize("workers", [1, 2])
def test_the_loader_reports_each_parsed_trace(workers: int) -> None:
    # GIVEN a real 4-rank run WHEN loaded with a progress callback
    seen: list[tuple[int, int]] = []
    load_path(RUN, LoadOptions(workers=workers, progress=lambda done, total: seen.append((done, total))))
    # THEN it counts from 0 to the 4 traces, never backwards
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_no_display_when_piped_or_quiet() -> None:
    # GIVEN stderr that is not a terminal (as under pytest) THEN there is no callback at all
    with parsing_progress() as progress:
        assert progress is None
    with parsing_progress(quiet=True) as progress:
        assert progress is None


def test_a_terminal_shows_the_traces_being_parsed(tmp_path: Path) -> None:
    # GIVEN analyze run on a pseudo-terminal
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "perftracker", "analyze", str(RUN), "-o", str(tmp_path / "out"),
                             "--no-cache", "--workers", "1"], stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    # THEN the display names what it does and how many files, and the analysis still prints its verdict
    assert proc.returncode == 0 and "parsing traces" in text and "/4" in text and "Verdict" in text
