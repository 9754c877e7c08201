"""Bounded resources: only regular files are read, every file under a cap, gzip bombs and whitespace runs
cost no memory, and every regex on untrusted lines is linear (1 MB lines) (issue 14, item 2)."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.bounded import LineBlocks, inflate, iter_lines, loads_json, not_regular, read_capped
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.traces.kineto_read import parse_trace
from perftracker.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20


def _run_with_one_trace(tmp_path: Path) -> Path:
    TraceBuilder(rank=0).step(1, 100, 50).write(tmp_path / "rank-0.json")
    return tmp_path


def test_a_fifo_and_a_symlink_to_a_device_are_noted_never_read(tmp_path: Path) -> None:
    # GIVEN a folder with a trace, a FIFO named like a trace, a symlink to /dev/zero named like one, a socket
    run = _run_with_one_trace(tmp_path)
    os.mkfifo(run / "rank-1.json")
    (run / "rank-2.json.gz").symlink_to("/dev/zero")
    (run / "broken.json").symlink_to(run / "nowhere")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(run / "nccl.sock"))
    # WHEN it is loaded (a FIFO would block an open(); /dev/zero would never end)
    started = time.monotonic()
    store = load_path(run, LoadOptions(cache_dir=None, workers=1))
    sock.close()
    # THEN it returns at once with the trace, and a note names each entry and what it is
    assert time.monotonic() - started < 10 and len(store.events) == 1
    said = {n.source: n.message for n in store.notes}
    assert "a FIFO" in said[str(run / "rank-1.json")]
    assert "a symlink to a character device" in said[str(run / "rank-2.json.gz")]
    assert "broken symlink" in said[str(run / "broken.json")] and "a socket" in said[str(run / "nccl.sock")]


def test_opening_a_fifo_directly_raises_input_error_without_blocking(tmp_path: Path) -> None:
    # GIVEN a FIFO with no writer; WHEN read as a trace; THEN an InputError says what it is
    os.mkfifo(tmp_path / "rank-0.json")
    with pytest.raises(InputError, match="FIFO"):
        parse_trace(tmp_path / "rank-0.json")
    assert not_regular(tmp_path / "rank-0.json") == "a FIFO (named pipe)"


def test_a_file_over_the_cap_is_read_up_to_it_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a cap of 4 KB and a plain trace of ~40 KB
    monkeypatch.setenv("PERFTRACKER_MAX_FILE_BYTES", "4096")
    builder = TraceBuilder(rank=0)
    for i in range(300):
        builder.cpu(f"op{i}", 10 * i, 5)
    path = builder.write(tmp_path / "rank-0.json")
    # WHEN parsed
    trace = parse_trace(path)
    # THEN the events in the first 4 KB are kept, and the notes say the cap and that the total is unknown
    said = " | ".join(m for m, _ in trace.messages())
    assert 0 < len(trace.names) < 300 and "per-file cap of 4,096" in said and "unknown" in said
    assert trace.cut is not None and trace.cut.share_lost is None


def test_a_gzip_bomb_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a cap of 1 MB and a gzip of one event followed by 64 MB of digits (no whitespace to squeeze)
    monkeypatch.setenv("PERFTRACKER_MAX_FILE_BYTES", str(MB))
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = [deflate.compress(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}, '
                             b'{"ph": "X", "name": "b", "args": {"x": ')]
    body += [deflate.compress(b"7" * MB) for _ in range(64)]
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(b"".join(body) + deflate.flush())
    # WHEN parsed; THEN inflating stopped at the cap, the complete event is kept, the cap is said
    trace = parse_trace(path)
    assert trace.names == ["a"] and any("reaches perftracker's per-file cap" in m for m, _ in trace.messages())


def _peak_rss_mb(code: str) -> float:
    """Peak RSS (MB) of a fresh interpreter running `code` after importing the trace reader, minus its peak
    before running it."""
    script = ("import resource, sys\nfrom pathlib import Path\nfrom perftracker.collectors.traces.kineto_read "
              "import parse_trace\nfrom perftracker.errors import InputError\n"
              "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n" + code +
              "\nprint((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def test_whitespace_inside_a_gzip_costs_no_memory(tmp_path: Path) -> None:
    # GIVEN gzips holding 128 MB of whitespace: alone, and between two events of a trace
    for name, head, tail in (("blank", b"", b""), ("inside", b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1},',
                                                   b'{"ph": "X", "name": "b", "ts": 2}]}')):
        deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunks = [deflate.compress(head)] + [deflate.compress(b" \n\t" * (MB // 3)) for _ in range(128)]
        (tmp_path / f"{name}.json.gz").write_bytes(b"".join(chunks) + deflate.compress(tail) + deflate.flush())
    # WHEN each is parsed in a fresh process
    grew = _peak_rss_mb(
        f"try:\n    parse_trace(Path({str(tmp_path / 'blank.json.gz')!r}))\nexcept InputError:\n    pass\n"
        f"t = parse_trace(Path({str(tmp_path / 'inside.json.gz')!r}))\nassert t.names == ['a', 'b'], t.names")
    # THEN memory grew by a few MB, not by the 128 MB the stream holds (it was 2x that before)
    assert grew < 64


def test_a_cut_gzip_bomb_stream_and_a_corrupt_one_end_cleanly(tmp_path: Path) -> None:
    # GIVEN a gzip cut in its middle and one with garbage in place of its end
    data = gzip.compress(json.dumps(TraceBuilder(rank=0).step(1, 1, 1).step(2, 5, 1).document()).encode())
    # WHEN inflated; THEN the cut one is incomplete without error, the corrupt one says its error
    cut = inflate(data[: len(data) // 2])
    assert not cut.complete and not cut.error
    bad = inflate(data[:20] + b"\xff" * 50)
    assert bad.error or not bad.complete


def test_lines_are_cut_and_counted(tmp_path: Path) -> None:
    # GIVEN a file with a 3 MB line between two short ones, with \r\n and \r line ends
    path = tmp_path / "log.txt"
    path.write_bytes(b"first\r\n" + b"x" * (3 * MB) + b"\rlast")
    # WHEN its lines are read
    blocks = LineBlocks(path)
    lines = list(iter_lines(blocks))
    # THEN the long line is cut to 64 KB and numbered right, the last line keeps its number
    assert [(n, len(t)) for n, t in lines] == [(1, 5), (2, 65536), (3, 4)]
    assert blocks.stats.cut_lines == 1 and blocks.ends_open


def test_read_capped_says_what_it_left_out(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * 100)
    capped = read_capped(path, 10)
    assert len(capped.data) == 10 and capped.left_out == 90 and "over perftracker's per-file cap" in capped.note(10)


def test_loads_json_turns_deep_nesting_into_value_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_json("[" * 100_000)


LONG = 1 << 20  # 1 MB lines: a quadratic regex takes hours on these, a linear one milliseconds


def _adversarial_lines(length: int = LONG) -> list[str]:
    """Lines of `length` characters built from the pieces each pattern repeats (tokens with no closing part)."""
    pieces = ("a", " ", "1", ":", "host:1:2 [0] ", "; OOB eth0:", "[0]mlx5_0:", "nccl", "comm 0x1 rank 1 ",
              "Init timings (", "NCCL_X set to ", "Loaded net plugin x ", "Got completion from peer x with error a(",
              "[PG 1 PG GUID 1(", "rate: ", "1.", "x: ", "[", "a=\"", "{", "\t", "Gb/sec ", "E1218 20:27:21 ")
    return [(piece * (length // len(piece) + 1))[:length] for piece in pieces]


@pytest.mark.parametrize("kind", ["nccl", "ethtool", "smi", "prometheus", "joblog", "sysfs", "profile"])
def test_every_line_parser_is_linear_on_1mb_lines(tmp_path: Path, kind: str) -> None:
    # GIVEN a file of 1 MB adversarial lines, each made to feed the parser's patterns (prefixed so that
    # the parser's keyword checks let them through)
    prefix = {"nccl": "node1:1:2 [0] NCCL INFO ", "ethtool": "     rx_prio3_pause", "smi": "2026/01/01 00:00:00, 0, ",
              "prometheus": "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",", "joblog": "[rank0]: ",
              "sysfs": "/sys/class/infiniband/mlx5_0/ports/1/counters/x:", "profile": "thread (1): Main;"}[kind]
    head = {"ethtool": "NIC statistics:\n", "smi": "timestamp, index, temperature.gpu\n",
            "prometheus": "", "joblog": "Traceback (most recent call last)\n"}.get(kind, "")
    name = {"sysfs": "n.sysfs.txt", "profile": "profiles/rank-0.txt", "ethtool": "n.ethtool.txt"}.get(kind, "x.log")
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(head + "".join(prefix + line + "\n" for line in _adversarial_lines()))
    # WHEN the parser reads it
    started = time.process_time()  # CPU time: a busy machine stretches the wall clock, not the work
    _parse(kind, path)
    # THEN it takes seconds of CPU at most (23 MB of text), not the hours a quadratic pattern would
    assert time.process_time() - started < 20


def _parse(kind: str, path: Path) -> None:
    from perftracker.collectors.counters.inputs import load_counter_inputs
    from perftracker.collectors.counters.prometheus import parse_text
    from perftracker.collectors.counters.rdma import load_sysfs_dump
    from perftracker.collectors.nccl.log import parse_nccl_file
    from perftracker.collectors.postmortem.joblogs import parse_job_log
    from perftracker.collectors.stacks.samples import load_profile_inputs

    if kind == "nccl":
        parse_nccl_file(path)
    elif kind == "prometheus":
        parse_text(path.read_text())
    elif kind == "joblog":
        parse_job_log(path)
    elif kind == "sysfs":
        load_sysfs_dump(path)
    elif kind == "profile":
        load_profile_inputs([path])
    else:
        load_counter_inputs([path])


def _untrusted_patterns() -> list[tuple[str, re.Pattern[str] | re.Pattern[bytes]]]:
    """Every module-level compiled pattern of the collectors, rundir and bounded (all of them see input)."""
    import importlib
    import pkgutil

    import perftracker.collectors as collectors

    modules = ["perftracker.rundir", "perftracker.bounded"]
    for info in pkgutil.walk_packages(collectors.__path__, "perftracker.collectors."):
        modules.append(info.name)
    found = []
    for name in modules:
        for attr, value in vars(importlib.import_module(name)).items():
            if isinstance(value, re.Pattern):
                found.append((f"{name.rsplit('.', 1)[-1]}.{attr}", value))
    return found


def test_every_pattern_of_the_collectors_is_linear_on_the_longest_lines_they_see() -> None:
    # GIVEN every compiled pattern the collectors apply to input, and strings as long as the longest line a
    # pattern is ever given (MAX_LINE_CHARS: lines are cut there), repeating the pieces the patterns look
    # for: a quadratic pattern needs tens of seconds on one of them (the NCCL interface list took 26 s)
    from fuzzing import time_limit

    from perftracker.bounded import MAX_LINE_CHARS

    patterns = _untrusted_patterns()
    subjects = _adversarial_lines(MAX_LINE_CHARS)
    assert len(patterns) > 50
    slow = []
    for name, pattern in patterns:
        try:
            with time_limit(3.0):
                for text in subjects:
                    subject = text.encode() if isinstance(pattern.pattern, bytes) else text
                    # WHEN each searches and scans (up to 200 matches) each string
                    pattern.search(subject)  # type: ignore[arg-type]
                    for _ in zip(range(200), pattern.finditer(subject)):  # type: ignore[arg-type]
                        pass
        except Exception:  # the time limit fired
            slow.append(name)
    # THEN each pattern is done with all of them within the limit
    assert slow == []
