"""Long commands say how far they are on a terminal, and print nothing extra when piped or quiet.

Promise checked: the loader reports (files parsed, files in all) as the map step goes, in order, ending
at all files, with one worker and with a process pool; `parsing_progress` gives no callback when stderr
is not a terminal or --quiet is given, and a real rich display on a (pseudo-)terminal for analyze, diff
(a bar for each side's load) and timeline.
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perftracker.cli.progress import parsing_progress
from perftracker.collectors.loading import LoadOptions, load_path

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "accuracy" / "clean-repro-a"


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


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """`perftracker ARGS` run on a pseudo-terminal: its exit code and everything it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "perftracker", *args], stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True)
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
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_shows_the_traces_being_parsed(tmp_path: Path) -> None:
    # GIVEN analyze run on a pseudo-terminal
    code, text = _on_a_terminal("analyze", str(RUN), "-o", str(tmp_path / "out"), "--no-cache", "--workers", "1")
    # THEN the display names what it does and how many files, and the analysis still prints its verdict
    assert code == 0 and "parsing traces" in text and "/4" in text and "Verdict" in text


def test_diff_and_timeline_show_their_parsing_too(tmp_path: Path) -> None:
    # GIVEN two ranks' traces of the real run (the least that shows a display), and diff (two loads, one after
    # the other) and timeline run on a pseudo-terminal
    two = tmp_path / "two"
    two.mkdir()
    for trace in sorted((RUN / "traces").iterdir())[:2]:
        shutil.copy(trace, two / trace.name)
    code, text = _on_a_terminal("diff", str(two), str(two), "--no-cache")
    # THEN diff shows the traces being parsed, for each side, and still says its verdict
    assert code == 0 and text.count("parsing traces") >= 2 and "/2" in text and "No change beyond" in text
    # AND so does timeline
    code, text = _on_a_terminal("timeline", str(two), "-o", str(tmp_path / "t.json.gz"), "--no-cache")
    assert code == 0 and "parsing traces" in text and "/2" in text and "Timeline:" in text
