"""Inputs stay inside the folder the user named: links out of it are not followed (a note names each one;
--follow-links allows files), links into /proc, /sys, /dev never; an output folder inside the input is not
read back; loops, hidden names, deep nesting and over-long paths are each said, never a crash or a hang.
The probe's run directories are rebuilt here: a run whose job log, NCCL log and env snapshot link to
files outside it, an -o inside the input analyzed twice, a link to / and to /proc/kmsg."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker.bounded import open_regular
from perftracker.cli import app
from perftracker.containment import MAX_DEPTH, PATH_MAX, walk
from perftracker.errors import InputError
from perftracker.rundir import discover

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
OUTSIDE_LINE = "[rank1]: RuntimeError: OUTSIDE-MARKER-7f3a line from a file outside the input"


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """GIVEN the stalled gloo sample whose job log, an NCCL log and rank 0's env link to files outside it."""
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "gloo-4rank-stall-rank2", run)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "job.log").write_text("[rank1]: Traceback (most recent call last):\n"
                                     '[rank1]:   File "/app/t.py", line 3, in <module>\n'
                                     f"{OUTSIDE_LINE}\n", encoding="utf-8")
    (outside / "nccl.log").write_text("node-a:123:123 [0] NCCL INFO NCCL_IB_HCA set by environment to OUTSIDE-MARKER-7f3a\n",
                                      encoding="utf-8")
    (outside / "env.json").write_text(json.dumps({"rank": 0, "env": {"NCCL_SOCKET_IFNAME": "OUTSIDE-MARKER-7f3a"}}),
                                      encoding="utf-8")
    (run / "output" / "job.log").symlink_to("../../outside/job.log")
    (run / "nccl").mkdir()
    (run / "nccl" / "node-a.123.log").symlink_to("../../outside/nccl.log")
    (run / "env" / "rank-0.json").unlink()
    (run / "env" / "rank-0.json").symlink_to(outside / "env.json")
    return run, outside


def test_links_out_of_the_input_are_not_followed_and_each_is_named(tmp_path: Path) -> None:
    run, _ = _run(tmp_path)
    out = tmp_path / "out"
    # WHEN analyzed
    result = CliRunner().invoke(app, ["analyze", str(run), "-o", str(out)], terminal_width=250)
    # THEN no outside line reaches any output, and findings.json notes each link by name
    assert result.exit_code == 0, result.output
    texts = [result.output, (out / "findings.json").read_text(encoding="utf-8"),
             (out / "report.html").read_text(encoding="utf-8")]
    texts += [p.read_bytes().decode("latin-1") for p in (out / "tables").glob("*.parquet")]
    assert not [t for t in texts if "OUTSIDE-MARKER-7f3a" in t]
    notes = {n["source"]: n["message"] for n in json.loads(texts[1])["notes"]}
    for link in ("output/job.log", "nccl/node-a.123.log", "env/rank-0.json"):
        assert "a symlink leading outside the input folder" in notes[str(run / link)], notes


def test_follow_links_reads_them(tmp_path: Path) -> None:
    run, _ = _run(tmp_path)
    found = discover(run, follow_links=True)
    assert run / "output" / "job.log" in found.files and not found.skipped


def test_links_to_the_root_and_to_proc_kmsg_are_never_read(tmp_path: Path) -> None:
    # GIVEN a folder with a trace-named link to /proc/kmsg (a regular file whose read blocks) and a link to /
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank-0.json").symlink_to("/proc/kmsg")
    (run / "root").symlink_to("/")
    # WHEN discovered, even with --follow-links THEN neither is read, each said
    found = discover(run, follow_links=True)
    said = dict(found.skipped)
    assert not found.files
    assert "in /proc" in said[run / "rank-0.json"] and "not followed" in said[run / "root"]
    # AND opened by name, /proc/kmsg is refused at once
    with pytest.raises(InputError, match="blocks"):
        open_regular(Path("/proc/kmsg"))


def test_an_output_folder_inside_the_input_is_not_read_back(tmp_path: Path) -> None:
    # GIVEN the sample with -o inside it, analyzed once with --timeline
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "ddp-gloo-4rank-slow-rank2", run)
    first = CliRunner().invoke(app, ["analyze", str(run), "-o", str(run / "out"), "--timeline"])
    assert first.exit_code == 0, first.output
    # WHEN analyzed again into the same place
    again = CliRunner().invoke(app, ["analyze", str(run), "-o", str(run / "out")])
    document = json.loads((run / "out" / "findings.json").read_text(encoding="utf-8"))
    # THEN the earlier output is not an input: still 4 ranks, and a note says the folder was left out
    assert again.exit_code == 0, again.output
    assert document["summary"]["ranks"] == 4
    assert any("perftracker output folder" in n["message"] for n in document["notes"])


def test_a_symlink_loop_is_named_a_loop(tmp_path: Path) -> None:
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    found = discover(tmp_path)
    assert {p.name: w for p, w in found.unreadable}["a.json"].startswith("a symlink loop")


def test_hidden_names_are_said(tmp_path: Path) -> None:
    (tmp_path / ".rank-0.json").write_text("{}")
    (tmp_path / "rank-1.json").write_text("{}")
    found = discover(tmp_path)
    assert [(p.name, "hidden" in w) for p, w in found.skipped] == [(".rank-0.json", True)]


def test_folders_nested_beyond_the_stack_are_walked_without_recursion(tmp_path: Path) -> None:
    # GIVEN 1,200 nested folders (the probe's exit 70 came past ~980), a trace at depth 3 and one at the bottom
    deep = tmp_path
    for i in range(1200):
        if i == 3:
            (deep / "rank-0.json").write_text("{}")
        deep = deep / "d"
        os.mkdir(deep)
    (deep / "rank-1.json").write_text("{}")
    # WHEN walked THEN the shallow file is found and the cut is said
    try:
        found = discover(tmp_path)
        assert [p.name for p in found.files] == ["rank-0.json"]
        assert any(f"deeper than {MAX_DEPTH} levels" in w for _, w in found.skipped)
        # AND analyze says it with exit 2 (nothing to analyze), never 70
        result = CliRunner().invoke(app, ["analyze", str(tmp_path), "-o", str(tmp_path.parent / "o")])
        assert result.exit_code in (0, 2), result.output
    finally:  # bottom-up, without recursion: pytest's own clean-up of old temporary folders recurses per level
        while deep != tmp_path:
            for entry in deep.iterdir():
                if not entry.is_dir():
                    entry.unlink()
            os.rmdir(deep)
            deep = deep.parent


def test_paths_beyond_path_max_are_said_not_counted_as_missing(tmp_path: Path) -> None:
    # GIVEN folders whose path grows past PATH_MAX (made through directory descriptors)
    fd = os.open(tmp_path, os.O_RDONLY)
    name = "n" * 200
    try:
        for _ in range(PATH_MAX // 200 + 2):
            os.mkdir(name, dir_fd=fd)
            new = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
    finally:
        os.close(fd)
    # WHEN walked THEN the walk ends with a skip naming PATH_MAX, no error
    skips = [e.skip for e in walk(tmp_path) if e.skip]
    assert any("PATH_MAX" in s for s in skips), skips


def test_negative_durations_are_said_when_taken_as_zero(tmp_path: Path) -> None:
    # GIVEN a trace with an event of negative duration (the probe: clamped to 0 without a note)
    from perftracker.collectors.traces.comm_kernels import cached_comm_kernels
    from perftracker.collectors.traces.trace_map import parse_one

    trace = {"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 100, "dur": -50, "pid": 1, "tid": 1,
                              "cat": "cpu_op"}]}
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    result = parse_one(path, None, cached_comm_kernels((), ()))
    # THEN the event is kept 0 long, and a note says how many were
    assert result.ok and result.events is not None and result.events["dur_ns"].tolist() == [0]
    assert any("1 event(s) with a negative duration were taken as 0 long" in m for m, _ in result.notes)
