"""Hand-made hostile inputs of issue 14: each becomes rows plus a note naming the file, never a crash.

Every case here once ended `analyze` / `postmortem` with exit 70 (an OverflowError, a RecursionError,
a wrapped rank...); each test feeds the parser the smallest input that did it.
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.collectors.counters.gpu_samples import load_gpu_jsonl, load_smi_csv
from perftracker.collectors.counters.inputs import load_counter_inputs
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.nccl.log import parse_nccl_file
from perftracker.collectors.postmortem.flight_recorder import load_fr_dumps, plain_unpickle
from perftracker.collectors.stacks.samples import load_profile_inputs
from perftracker.collectors.steps import load_step_files
from perftracker.collectors.traces.comm_kernels import load_comm_kernels
from perftracker.collectors.traces.kineto import build_tables
from perftracker.collectors.traces.kineto_read import parse_trace
from perftracker.store import Store


def _trace(path: Path, **top: object) -> Path:
    doc = TraceBuilder(rank=0).step(1, 100, 50).kernel("k", 110, 10).document()
    doc.update(top)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("ts", ["1e30", "99999999999999999999", "-1e30", "1e400"])
def test_a_timestamp_past_int64_drops_that_event_only(tmp_path: Path, ts: str) -> None:
    # GIVEN a trace with one event whose ts is far past what int64 nanoseconds hold
    path = _trace(tmp_path / "rank-0.json")
    text = path.read_text().replace('"ts": 110', f'"ts": {ts}', 1)
    path.write_text(text)
    # WHEN it is parsed and tabled
    trace = parse_trace(path)
    events, _ = build_tables(trace, 0, 0, load_comm_kernels())
    # THEN the other events are kept and the dropped one is said
    assert len(events) == 2 and trace.dropped == 1
    assert any("without a usable timestamp" in m for m, _ in trace.messages())


def test_huge_ids_and_step_numbers_become_unknown_not_an_overflow(tmp_path: Path) -> None:
    # GIVEN correlation, stream, device, pid and a step number past int64 / the column widths
    doc = TraceBuilder(rank=0).step(1, 100, 50).kernel("k", 110, 10).document()
    doc["traceEvents"][1]["args"].update(correlation=10**20, stream=2**40, device=70000)
    doc["traceEvents"][1]["pid"] = 10**30
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#" + "9" * 30, "pid": 1,
                               "tid": 1, "ts": 300, "dur": 5})
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))
    # WHEN tabled
    events, steps = build_tables(parse_trace(path), 0, 0, load_comm_kernels())
    # THEN the values a column cannot hold are -1, never wrapped, and the odd step is no step
    kernel = events[events["name"] == "k"].iloc[0]
    assert (kernel["correlation"], kernel["stream"], kernel["device"]) == (-1, -1, -1)
    assert steps["step"].tolist() == [1]


def test_a_rank_past_the_range_is_not_wrapped_to_rank_0(tmp_path: Path) -> None:
    # GIVEN two traces: rank 0, and one whose distributedInfo claims rank 2**32 (int32 would wrap it to 0)
    _trace(tmp_path / "a.json", distributedInfo={"rank": 0, "world_size": 2})
    _trace(tmp_path / "rank-1.json", distributedInfo={"rank": 2**32, "world_size": 2})
    # WHEN loaded
    store = load_path(tmp_path, LoadOptions(cache_dir=None, workers=1))
    # THEN the second keeps the rank its file name gives, with a note, and no rank appears twice
    assert sorted(store.ranks["rank"].tolist()) == [0, 1]
    assert any("is not a rank" in n.message for n in store.notes)


@pytest.mark.parametrize("props", [[1], "x", [None, {"name": "A100"}]])
def test_device_properties_of_the_wrong_shape_are_ignored(tmp_path: Path, props: object) -> None:
    # GIVEN deviceProperties that is not a list of objects
    _trace(tmp_path / "rank-0.json", deviceProperties=props)
    # WHEN loaded; THEN it loads (the objects among them are kept)
    store = load_path(tmp_path, LoadOptions(cache_dir=None, workers=1))
    assert len(store.events) == 3


def test_step_files_with_bad_values_keep_the_good_lines(tmp_path: Path) -> None:
    # GIVEN a step file with NaN/Infinity phases, phases_ns that is not an object, a huge rank, a 1e30 time
    good = {"rank": 0, "step": 1, "start_ns": 10, "end_ns": 20, "phases_ns": {"forward": 5}}
    lines = [good, {**good, "step": 2, "phases_ns": {"forward": float("nan"), "backward": float("inf")}},
             {**good, "step": 3, "phases_ns": [1, 2]}, {**good, "step": 4, "rank": 2**40},
             {**good, "step": 5, "end_ns": 1e30}]
    path = tmp_path / "steps" / "rank-0.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    # WHEN loaded
    steps, phases, _, notes = load_step_files([path])
    # THEN steps 1-3 are kept, 4 and 5 skipped with their lines named, the bad phases skipped and counted
    assert steps["step"].tolist() == [1, 2, 3]
    assert phases["dur_ns"].tolist() == [5]
    said = " ".join(n.message for n in notes)
    assert "line 4, 5" in said and "skipped 3 step phase(s)" in said


def test_a_superscript_digit_in_an_nccl_pid_is_no_header(tmp_path: Path) -> None:
    # GIVEN an NCCL line whose pid is '²' (str.isdigit() says yes, int() says no)
    path = tmp_path / "n.log"
    path.write_text("node1:1²:3 [0] NCCL INFO NET/IB : No device found.\nnode1:12:3 [0] NCCL INFO cudaDriverVersion 12040\n")
    # WHEN parsed; THEN the good line is read and the odd one is not a process
    rows, _ = parse_nccl_file(path)
    assert {(r["host"], r["pid"]) for r in rows if int(str(r["pid"])) >= 0} == {("node1", 12)}


def test_a_csv_field_over_the_csv_limit_costs_only_its_line(tmp_path: Path) -> None:
    # GIVEN nvidia-smi CSV with one field of 200,000 characters (csv's default limit is 131,072)
    path = tmp_path / "node.nvidia-smi.csv"
    path.write_text("timestamp, index, uuid, temperature.gpu\n2026/01/01 00:00:00.000, 0, GPU-1, 50\n"
                    f"2026/01/01 00:00:01.000, 0, {'x' * 200_000}, 51\n2026/01/01 00:00:02.000, 0, GPU-1, 52\n")
    # WHEN loaded
    rows, _, notes = load_smi_csv(path)
    # THEN the other samples are kept and the cut line is said
    assert [r["value"] for r in rows] == [50.0, 52.0]
    assert any("skipped" in n.message for n in notes) and any("cut" in n.message for n in notes)


def test_gpu_samples_with_infinite_or_huge_numbers_are_skipped(tmp_path: Path) -> None:
    # GIVEN GPU sample lines with gpu=Infinity, ts 1e30, and a metric of 10**400
    path = tmp_path / "h.gpu.jsonl"
    path.write_text('{"gpu": Infinity, "ts_ns": 1, "metrics": {}}\n{"gpu": 0, "ts_ns": 1e30, "metrics": {}}\n'
                    '{"gpu": 0, "ts_ns": 5, "metrics": {"temp_c": 1' + "0" * 400 + ', "power_w": 100}}\n')
    # WHEN loaded; THEN the one good sample keeps its finite metric, the rest is counted
    rows, _, notes = load_gpu_jsonl(path)
    assert [(r["name"], r["value"]) for r in rows] == [("power_w", 100.0)]
    assert "2 line(s)" in notes[0].message


def test_non_numeric_profile_sidecar_fields_are_defaults(tmp_path: Path) -> None:
    # GIVEN a stack profile whose sidecar says pid "x", rate_hz "fast", duration_s 1e400
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "rank-0.txt").write_text("thread (1): MainThread;main (a.py:1) 3\n")
    (folder / "rank-0.json").write_text('{"rank": 0, "pid": "x", "rate_hz": "fast", "duration_s": 1e400}')
    # WHEN loaded; THEN the samples are there with unknown pid and zero rate
    table, _ = load_profile_inputs([folder / "rank-0.txt"])
    assert table[["pid", "rate_hz", "count"]].values.tolist() == [[-1, 0.0, 3]]


@pytest.mark.parametrize("data", [b"\x80\x04a.", b"\x80\x04]\x94h\x00a.", b"\x80\x04(s.", b"\x80\x04\x8a\xff"])
def test_malformed_and_self_referential_pickles_are_refused(data: bytes) -> None:
    # GIVEN an APPEND on an empty stack, a list holding itself, SETITEMS on a mark, a cut LONG1
    # WHEN walked; THEN refused as not a usable dump
    with pytest.raises(ValueError):
        plain_unpickle(data)


def test_a_billion_laughs_pickle_is_refused_without_building_it(tmp_path: Path) -> None:
    # GIVEN a 400-byte pickle whose value, with shared references repeated, is 2**60 objects
    value: list[object] = [1]
    for _ in range(60):
        value = [value, value]
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"entries": [{"input_sizes": value}]}, protocol=4))
    # WHEN loaded as a flight-recorder dump
    frame, _, notes = load_fr_dumps([path])
    # THEN it is a note, not memory exhaustion
    assert frame.empty and "expands to" in notes[0].message


def test_deep_nesting_in_every_json_input_is_a_note(tmp_path: Path) -> None:
    # GIVEN a trace, a counter line and an FR dump nested 100,000 levels deep
    deep = "[" * 100_000
    (tmp_path / "rank-0.json").write_text('{"traceEvents": ' + deep)
    (tmp_path / "h.gpu.jsonl").write_text('{"gpu": 0, "ts_ns": 1, "metrics": ' + deep + "\n")
    (tmp_path / "fr_dump_rank_0.json").write_text('{"entries": ' + deep + ', "pg_config": {}}')
    # WHEN each is read; THEN none raises past its loader
    with pytest.raises(Exception) as refused:
        parse_trace(tmp_path / "rank-0.json")
    assert type(refused.value).__name__ == "InputError"
    load_counter_inputs([tmp_path / "h.gpu.jsonl"])
    _, _, notes = load_fr_dumps([tmp_path / "fr_dump_rank_0.json"])
    assert notes


def test_a_lone_surrogate_in_a_name_is_stored(tmp_path: Path) -> None:
    # GIVEN a kernel named with a lone surrogate escape (UTF-8 cannot encode it; pandas/arrow refuse it)
    path = _trace(tmp_path / "rank-0.json")
    path.write_text(path.read_text().replace('"name": "k"', '"name": "k\\ud800"'))
    # WHEN loaded into a Store; THEN the name is kept with a replacement character
    events, _ = build_tables(parse_trace(path), 0, 0, load_comm_kernels())
    store = Store()
    store.set_table("events", events)
    assert "k\ufffd" in set(store.events["name"].astype(str))


def test_a_conformed_table_never_wraps_a_value(tmp_path: Path) -> None:
    # GIVEN a steps frame with a rank past int32 and a NaN duration
    import pandas as pd

    store = Store()
    # WHEN it enters the Store
    store.set_table("steps", pd.DataFrame({"rank": [2**32, 1], "step": [1, 2], "start_ns": [0, 0],
                                           "dur_ns": [float("nan"), 5.0]}))
    # THEN the rank is -1 (unknown), not 0, and the note names the table
    assert store.steps["rank"].tolist() == [-1, 1] and store.steps["dur_ns"].tolist() == [-1, 5]
    assert store.notes and "steps.rank" in store.notes[0].message


def test_a_gzip_trace_with_garbage_after_good_data_keeps_the_events(tmp_path: Path) -> None:
    # GIVEN a gzip trace whose compressed bytes are damaged near the end
    data = gzip.compress(json.dumps(TraceBuilder(rank=0).step(1, 100, 50).document()).encode() + b" " * 4096)
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(data[:-12] + b"\x00" * 12)
    # WHEN parsed; THEN the event is there and the damage is said
    trace = parse_trace(path)
    assert len(trace.names) == 1 and any("gzip" in m for m, _ in trace.messages())


def test_bytes_that_are_not_utf8_in_a_gzip_trace_are_replaced(tmp_path: Path) -> None:
    # GIVEN a gzip trace with a byte that is not UTF-8 inside a kernel name (found by scripts/fuzz.py)
    text = json.dumps(TraceBuilder(rank=0).step(1, 100, 50).kernel("k", 110, 10).document()).encode()
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(text.replace(b'"k"', b'"k\xff"')))
    # WHEN parsed; THEN every event is kept, the name read with U+FFFD, and a note says so
    trace = parse_trace(path)
    assert len(trace.names) == 3 and "k\ufffd" in trace.names
    assert any("not UTF-8" in m for m, _ in trace.messages())
