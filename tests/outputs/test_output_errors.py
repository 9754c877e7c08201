"""Where perftracker cannot write is the user's to fix, said as such: an `-o` naming a file (or a folder under
one), an unwritable `-o`, a disk that fills while the report is written and a bad `--comm-kernel` regex
exit 2 with one line saying what to do (never exit 70), before any work where that can be known, and the
verdict of a finished analysis is printed even when its report cannot be written."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner, Result

from perftracker.cli import app
from perftracker.containment import OUTPUT_MARK


def perftracker(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_line_exit_two(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("perftracker: ") and "internal error" not in line
    return line


def small_trace(folder: Path) -> Path:
    b = TraceBuilder(rank=0)
    for n in range(3):
        b.step(n + 1, n * 1000, 1000).kernel("gemm", n * 1000 + 10, 900, launch_ts=n * 1000 + 1)
    b.write(folder / "rank-0.json")
    return folder


def commands_writing_to(out: Path, tmp: Path) -> dict[str, list[str]]:
    """Every command that takes -o, aimed at `out`; `run` would leave a marker file if its job started."""
    marker = tmp / "the-job-ran"
    return {
        "analyze": ["analyze", str(small_trace(tmp / "t")), "-o", str(out)],
        "postmortem": ["postmortem", str(tmp / "t"), "-o", str(out)],
        "demo": ["demo", "-o", str(out)],
        "attach": ["attach", "pid:1", "-o", str(out), "--duration", "1"],
        "run": ["run", "-o", str(out), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
    }


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_an_out_that_is_a_file_is_said_before_any_work_in_every_command(tmp_path: Path, where: str) -> None:
    # GIVEN -o naming an existing file, or a folder under one
    (tmp_path / "report.txt").write_text("not a folder")
    out = tmp_path / "report.txt" if where == "file" else tmp_path / "report.txt" / "out"
    for name, args in commands_writing_to(out, tmp_path).items():
        # WHEN each command that writes to -o is run
        line = one_line_exit_two(perftracker(*args))
        # THEN it says where, what, and what to do, before doing anything (run starts no job)
        assert line.startswith(f"perftracker: {out}: ") and "not a folder. Give -o a folder" in line, (name, line)
    assert not (tmp_path / "the-job-ran").exists()


def test_an_unwritable_out_and_summary_are_said_before_any_work(tmp_path: Path, unwritable_dir: Path) -> None:
    # GIVEN a folder this process cannot write into
    trace = small_trace(tmp_path / "t")
    # WHEN analyze writes there, or postmortem its --summary there
    analyze = one_line_exit_two(perftracker("analyze", str(trace), "-o", str(unwritable_dir / "out")))
    summary = one_line_exit_two(perftracker("postmortem", str(trace), "-o", str(tmp_path / "pm"),
                                            "--summary", str(unwritable_dir / "summary.txt")))
    # THEN each says the folder, the reason and the option to change; no analysis ran
    assert analyze.startswith(f"perftracker: {unwritable_dir / 'out'}: cannot write (") and \
        analyze.endswith("Give -o a folder you can write to."), analyze
    assert "Give --summary a folder you can write to." in summary and not (tmp_path / "pm").exists(), summary


def test_a_disk_that_fills_while_writing_still_gets_the_verdict(tmp_path: Path, tmpfs: Callable[..., Path]) -> None:
    # GIVEN a 512 KiB disk: room for findings.json and tables/, not for report.html (plotly.js is inlined)
    disk = tmpfs("512k")
    # WHEN analyze writes its outputs there
    result = perftracker("analyze", str(small_trace(tmp_path / "t")), "-o", str(disk / "out"), "--no-cache")
    # THEN the verdict of the finished analysis is printed, but no report path that does not exist
    line = one_line_exit_two(result)
    assert "Verdict:" in result.stdout and "Report:" not in result.stdout
    # AND the one line names the file, the reason, what to do, and what was written before it
    assert line.startswith(f"perftracker: {disk / 'out' / 'report.html'}: cannot write (No space left on device). "
                           "Free space there, or write elsewhere with -o"), line
    assert "findings.json written before it" in line
    # AND nothing half-written is left behind
    assert sorted(p.name for p in (disk / "out").iterdir() if p.name != ".perftracker-output") == ["findings.json",
                                                                                                "tables"]


def test_a_bad_comm_kernel_regex_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    # GIVEN a --comm-kernel pattern that is not a regular expression
    result = perftracker("analyze", str(small_trace(tmp_path / "t")), "-o", str(tmp_path / "out"),
                         "--comm-kernel", "my_allreduce(")
    # THEN analyze says which pattern and how to fix it, before any work
    line = one_line_exit_two(result)
    assert line.startswith("perftracker: comm_kernel_patterns / --comm-kernel 'my_allreduce(': not a valid regular expression (")
    assert "Fix the pattern" in line and not (tmp_path / "out").exists()


def test_diff_on_a_full_disk_says_the_verdict_and_exits_two(tmp_path: Path, tmpfs: Callable[..., Path]) -> None:
    # GIVEN two runs to compare and a 512 KiB disk: too small for a side's report.html (plotly.js is inlined)
    disk = tmpfs("512k")
    base, new = small_trace(tmp_path / "a"), small_trace(tmp_path / "b")
    # WHEN diff writes its outputs there
    result = perftracker("diff", str(base), str(new), "-o", str(disk / "out"), "--no-cache")
    # THEN the comparison's verdict is said, then one line naming the file and what to do (exit 2, not 70)
    line = one_line_exit_two(result)
    assert result.stdout.startswith("No change beyond the noise of running the same job twice.")
    assert line.startswith(f"perftracker: {disk / 'out' / 'base' / 'report.html'}: cannot write (No space left on "
                           "device). Free space there, or write elsewhere with -o"), line
    # AND nothing half-written is left behind (every file is whole: written, then renamed)
    assert not [p for p in (disk / "out").rglob("*") if p.name != OUTPUT_MARK and (p.name.startswith(".") or p.name.endswith(".tmp"))]
    # AND WHEN the two sides are saved analyses (nothing to analyze) and the disk is too small for the diff itself
    for side in ("a", "b"):
        assert perftracker("analyze", str(tmp_path / side), "-o", str(tmp_path / f"saved-{side}"),
                           "--no-cache").exit_code == 0
    tiny = tmpfs("64k")
    filler = tiny / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk, then free 1 KiB: no room for diff.json
    try:
        while os.write(fd, b"x" * 1024):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - 1024))
    result = perftracker("diff", str(tmp_path / "saved-a"), str(tmp_path / "saved-b"), "-o", str(tiny / "out"))
    # THEN it is the same: the verdict, one line naming diff.json or diff.html, exit 2, nothing half-written
    line = one_line_exit_two(result)
    assert result.stdout.startswith("No change beyond") and line.startswith(f"perftracker: {tiny / 'out' / 'diff.'}"), line
    assert not [p for p in (tiny / "out").rglob("*") if p.name != OUTPUT_MARK and (p.name.startswith(".") or p.name.endswith(".tmp"))]
