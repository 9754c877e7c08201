"""Recovery of any cut (issue 14, item 3): a trace cut anywhere keeps every complete event before the cut,
the analysis exits 0, and findings.json says what was kept and what share was lost."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.collectors.traces.kineto_read import parse_trace
from perftracker.errors import InputError


def _kineto_text() -> tuple[bytes, list[int]]:
    """A trace laid out as Kineto writes it (header keys, events, trailing keys), and where each event ends."""
    b = TraceBuilder(rank=0)
    b.step(1, 1000.5, 90).kernel("nccl:all_reduce", 1010.25, 20.125)
    doc = b.document()
    text = json.dumps({"schemaVersion": 1, "deviceProperties": [{"name": "A100"}],
                       "distributedInfo": doc["distributedInfo"], "traceEvents": doc["traceEvents"],
                       "traceName": "t", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}).encode()
    ends, start = [], text.index(b'"traceEvents": [') + 16
    for event in doc["traceEvents"]:
        start = text.index(json.dumps(event).encode(), start) + len(json.dumps(event))
        ends.append(start)
    return text, ends


def _parsed_events(path: Path) -> int:
    try:
        return len(parse_trace(path).names)
    except InputError:
        return 0


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_a_trace_cut_at_any_byte_keeps_every_complete_event_before_it(tmp_path: Path, gz: bool) -> None:
    # GIVEN a small trace, and each of its cuts inside the events array and after it (after `1.`, `-`,
    # `1e`, mid-string, mid-key, between events, in the trailing keys), plain or as a gzip stream cut short
    text, ends = _kineto_text()
    first = text.index(b'"traceEvents": [')
    wrong = []
    for cut in range(first, len(text), 1 if not gz else 3):
        head = text[:cut]
        if gz:
            deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
            data = deflate.compress(head) + deflate.flush(zlib.Z_SYNC_FLUSH)
        else:
            data = head
        path = tmp_path / ("rank-0.json.gz" if gz else "rank-0.json")
        path.write_bytes(data)
        # WHEN it is parsed
        kept = _parsed_events(path)
        # THEN it has exactly the events that end before the cut
        if kept != sum(1 for e in ends if e <= cut):
            wrong.append((cut, head[-12:], kept))
    assert wrong == []


def test_the_note_says_events_kept_and_the_share_lost(tmp_path: Path) -> None:
    # GIVEN a plain trace of 100 events cut in the middle of event 51
    builder = TraceBuilder(rank=0)
    for i in range(100):
        builder.cpu(f"op{i}", 10 * i, 5)
    full = json.dumps(builder.document()).encode()
    cut = full.index(b'"op50"') + 3
    (tmp_path / "rank-0.json").write_bytes(full[:cut])
    # WHEN parsed
    trace = parse_trace(tmp_path / "rank-0.json")
    # THEN 50 events are kept and the share lost is that of the file after the last complete event
    assert trace.cut is not None and trace.cut.events_kept == 50
    assert trace.cut.share_lost == pytest.approx((cut - trace.cut.bytes_used) / cut)
    assert "kept the 50 complete events" in trace.cut.message()


def test_a_cut_gzip_says_the_total_is_unknown(tmp_path: Path) -> None:
    # GIVEN a gzip of 1,000 events cut to its first 10% of compressed bytes (most of the trace is gone)
    builder = TraceBuilder(rank=0)
    for i in range(1000):
        builder.cpu(f"op{i}", 10 * i, 5, shape=[i, i + 1])
    data = gzip.compress(json.dumps(builder.document()).encode())
    (tmp_path / "rank-0.json.gz").write_bytes(data[: len(data) // 10])
    # WHEN parsed
    trace = parse_trace(tmp_path / "rank-0.json.gz")
    # THEN the note does not claim a small loss: the share is unknown, and says why
    assert trace.cut is not None and trace.cut.share_lost is None and 0 < trace.cut.events_kept < 1000
    assert "the gzip stream has no end" in trace.cut.message()


def test_a_damaged_middle_keeps_the_events_before_the_damage(tmp_path: Path) -> None:
    # GIVEN a complete trace with garbage written over its middle
    builder = TraceBuilder(rank=0)
    for i in range(20):
        builder.cpu(f"op{i}", 10 * i, 5)
    full = bytearray(json.dumps(builder.document()).encode())
    at = full.index(b'"op10"')
    full[at:at + 4] = b"@@@@"
    (tmp_path / "rank-0.json").write_bytes(bytes(full))
    # WHEN parsed; THEN the ten events before it are kept and the note says where it is damaged
    trace = parse_trace(tmp_path / "rank-0.json")
    assert trace.cut is not None and trace.cut.events_kept == 10 and "damaged" in trace.cut.message()


def test_analyze_of_a_run_with_a_cut_trace_exits_0_with_a_top_level_note(tmp_path: Path) -> None:
    # GIVEN a run directory whose rank-1 trace was cut after `1.` of a timestamp (once rejected whole)
    from typer.testing import CliRunner

    from perftracker.cli import app

    for rank in (0, 1):
        b = TraceBuilder(rank=rank)
        for i in range(10):
            b.step(i, 1000.5 + 100 * i, 90)
        b.write(tmp_path / "run" / f"rank-{rank}.pt.trace.json")
    path = tmp_path / "run" / "rank-1.pt.trace.json"
    text = path.read_bytes()
    path.write_bytes(text[: text.index(b'"ts": 1500.5') + len(b'"ts": 1.')])
    # WHEN analyzed through the CLI
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "--no-cache",
                                      "--workers", "1", "--quiet"])
    # THEN it exits 0 and findings.json holds a note with the events kept and the share lost
    assert result.exit_code == 0, result.output
    notes = json.loads((tmp_path / "out" / "findings.json").read_text())["notes"]
    cut = [n for n in notes if n["data"].get("kind") == "cut_trace"]
    assert len(cut) == 1 and cut[0]["source"] == str(path)
    assert cut[0]["data"]["events_kept"] == 5 and 0 < cut[0]["data"]["share_lost"] < 0.5
