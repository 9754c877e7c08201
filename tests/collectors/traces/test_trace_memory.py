"""Reading a Kineto trace costs about the columns it yields, not a Python object per event (issue 32), and the
streaming reader gives exactly what the whole-text reader gives."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from synth import generate
from synth_model import SynthSpec
from tracegen import TraceBuilder

from perftracker.collectors.traces import kineto_read
from perftracker.collectors.traces.comm_kernels import load_comm_kernels
from perftracker.collectors.traces.kineto import build_tables
from perftracker.collectors.traces.kineto_read import parse_trace
from perftracker.collectors.traces.kineto_stream import parse_streaming

ROOT = Path(__file__).resolve().parents[3]
# The rise of the peak RSS while one trace is parsed, against the trace's JSON bytes. Reading the whole text
# into Python objects rose 4.2x the JSON bytes here (~560 B per event); the streaming reader ~1.0x, most of it
# the fixed cost of a chunk. Generous, and still far below what reading it whole costs.
MAX_RISE_OVER_JSON = 2.5

_CHILD = r"""
import sys
from pathlib import Path
from perftracker.collectors.traces import trace_map
from perftracker.collectors.traces.comm_kernels import load_comm_kernels

def kb(field):
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])

kernels = load_comm_kernels()
with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
    clear.write("5")  # the high-water mark starts again from the RSS now
base = kb("VmRSS")
facts, notes, events, steps = trace_map._parse(Path(sys.argv[1]), kernels)
print((kb("VmHWM") - base) * 1024, len(events))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_parsing_a_trace_costs_about_its_json_size_not_a_python_object_per_event(tmp_path: Path) -> None:
    # GIVEN a synthetic trace (benchmarks/synth.py, one rank, 100 steps of 400 kernels): ~200k events, ~47 MB
    truth = generate(SynthSpec(ranks=1, steps=100, kernels_per_step=400, seed=1), tmp_path / "t", gzip=False)
    path = tmp_path / "t" / "rank-0.pt.trace.json"
    # WHEN a fresh process parses it as an engine's worker does (read, decode, events and steps tables)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True)
    rise, rows = (int(v) for v in done.stdout.split())
    # THEN every complete event is in the table, and its peak RSS rose by at most a small multiple of the JSON
    assert rows == truth.events_complete
    assert rise < MAX_RISE_OVER_JSON * truth.bytes_json, (rise, truth.bytes_json)


def _tables(path: Path, streamed: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                   list[str]]:
    with monkeypatch.context() as patch:
        if not streamed:
            patch.setattr(kineto_read, "parse_streaming", lambda _path: None)
        trace = parse_trace(path)
    events, steps = build_tables(trace, 0, 0, load_comm_kernels())
    return events, steps, [m for m, _ in trace.messages()]


def _same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    streamed = _tables(path, True, monkeypatch)
    whole = _tables(path, False, monkeypatch)
    pd.testing.assert_frame_equal(streamed[0], whole[0], check_exact=True)
    for column in streamed[0].columns:
        if isinstance(streamed[0][column].dtype, pd.CategoricalDtype):
            assert list(streamed[0][column].cat.categories) == list(whole[0][column].cat.categories)
    pd.testing.assert_frame_equal(streamed[1], whole[1], check_exact=True)
    assert streamed[2] == whole[2]


@pytest.mark.parametrize("name", ["trace_filter/sampled_rank-1.json.gz", "ns_resolution_trace",
                                  "df_index_resolver/df_index_resolver.json.gz"])
def test_the_streaming_reader_gives_what_reading_the_whole_text_gives_on_real_traces(
        hta_traces: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real trace (HTA's test data)
    path = hta_traces / name
    path = next(p for p in sorted(path.iterdir()) if ".json" in p.name) if path.is_dir() else path
    # WHEN it is read streaming, and whole; THEN it was streamed, and the tables and notes are the same
    assert parse_streaming(path) is not None
    _same(path, monkeypatch)


def _tricky(tmp_path: Path) -> list[Path]:
    """Traces the chunking must not get wrong: strings and nested args that look like event ends, lone
    surrogates, epoch timestamps only late in the file, pretty-printed text, keys after the events, gzip."""
    b = TraceBuilder(rank=0)
    b.step(1, 100, 5000)
    for i in range(3000):
        b.cpu(f"op{i % 7}", 110 + i, 1)
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL" if i % 5 == 0 else f"k{i % 3}", 120 + i, 1)
    doc = b.document()
    events = doc["traceEvents"]
    events[10]["name"] = '}, {"ph": "X", "name": "fake"}]'
    events[11]["args"] = {"nested": [{"a": 1}, {"b": {"c": [{}]}}], **events[11].get("args", {})}
    events[12]["name"] = "x\ud800y"
    late = [dict(e) for e in events]
    late[-5]["ts"] = 1682725898236567.123
    paths = []
    for name, data in (("plain.json", json.dumps(doc)), ("pretty.json", json.dumps(doc, indent=2)),
                       ("late_epoch.json", json.dumps({**doc, "traceEvents": late})),
                       ("after.json", json.dumps({"traceName": "t", **doc, "displayTimeUnit": "ms",
                                                  "baseTimeNanoseconds": 1700000000000000000}))):
        (tmp_path / name).write_text(data)
        paths.append(tmp_path / name)
    (tmp_path / "plain.json.gz").write_bytes(gzip.compress((tmp_path / "plain.json").read_bytes()))
    return [*paths, tmp_path / "plain.json.gz"]


def test_the_streaming_reader_gives_what_reading_the_whole_text_gives_on_tricky_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN traces whose text could fool a chunker (see `_tricky`), ~9k events each (several chunks)
    for path in _tricky(tmp_path):
        # WHEN each is read streaming, and whole; THEN it was streamed, and the tables and notes are the same
        assert parse_streaming(path) is not None, path.name
        _same(path, monkeypatch)


def test_cut_damaged_and_unusual_traces_are_left_to_the_whole_text_reader(tmp_path: Path) -> None:
    # GIVEN a trace cut off, one damaged in the middle, one with a field of an unusual type, a bare array
    text = (_tricky(tmp_path)[0]).read_bytes()
    cases = {"cut.json": text[:len(text) // 2], "damaged.json": text[:len(text) // 2] + b"\x00" + text[len(text) // 2:],
             "loose.json": text.replace(b'"ts": 110', b'"ts": "110"', 1),
             "bare.json": json.dumps(json.loads(text)["traceEvents"]).encode()}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        # WHEN read streaming; THEN the streaming reader declines (the whole-text reader keeps what it can)
        assert parse_streaming(tmp_path / name) is None, name
        assert len(parse_trace(tmp_path / name).names) > 0, name
