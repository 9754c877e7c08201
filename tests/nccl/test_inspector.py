"""NCCL Inspector output: the parser (good, cut, hostile, huge input), the straggler and bandwidth analyzers on
the fixtures built from the documented format (tests/fixtures/inspector/README.md), and `analyze` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.nccl.collective_bandwidth import (
    analyze_inspector_bandwidth,
    inspector_bandwidth_view,
)
from perftracker.analyzers.nccl.collective_timing import analyze_inspector_stragglers, inspector_lateness_view
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.nccl.inspector import (
    is_inspector_file,
    load_inspector_inputs,
    parse_inspector_file,
)
from perftracker.store import Store
from perftracker.store.schema import conform

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "inspector"

# The README's verbose example (plugins/profiler/inspector/README.md of NVIDIA/nccl), written on one line as
# inspector_json.cc writes every record.
VERBOSE = ('{"header":{"id":"0xe62dedaa97644a","rank":4,"n_ranks":8,"nnodes":1},"metadata":'
           '{"inspector_output_format_version":"v4.0","git_rev":"9019a1912-dirty","rec_mechanism":'
           '"nccl_profiler_interface","dump_timestamp_us":1752867229276385,"hostname":"example-hostname.cluster",'
           '"pid":438776},"coll_perf":{"coll":"ReduceScatter","coll_sn":1231,"coll_msg_size_bytes":2147483648,'
           '"coll_exec_time_us":41057,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":418.439467,'
           '"coll_busbw_gbs":366.134533,"event_trace_sn":{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":'
           '[{"channel_id":0,"kernel_start_sn":3,"kernel_stop_sn":48,"kernel_record_sn":47}]},"event_trace_ts":'
           '{"coll_start_ts":1752867229235059,"coll_stop_ts":1752867229235064,"kernel_events":[{"channel_id":0,'
           '"kernel_start_ts":1752867229235181,"kernel_stop_ts":1752867229275811,"kernel_record_ts":'
           '1752867229275811}]}}}')
P2P = ('{"header":{"id":"0xe62dedaa97644a","comm_name":"pp","rank":4,"n_ranks":8,"nnodes":1},"metadata":'
       '{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface",'
       '"dump_timestamp_us":1752867229276390,"hostname":"example-hostname.cluster","pid":438776},"p2p_perf":'
       '{"p2p":"Send","p2p_sn":7,"p2p_peer":5,"p2p_msg_size_bytes":1048576,"p2p_exec_time_us":20,'
       '"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":52.4,"p2p_busbw_gbs":52.4}}')


def _store(paths: list[Path]) -> Store:
    tables, notes, _ = load_inspector_inputs(paths)
    store = Store(notes=notes)
    store.set_table("nccl_collectives", tables["nccl_collectives"])
    return store


def _case(name: str) -> list[Path]:
    return sorted((FIXTURES / name).glob("*.log"))


def test_parser_reads_every_field_of_the_documented_records(tmp_path: Path) -> None:
    # GIVEN the README's verbose collective record and a p2p record, one per line
    path = tmp_path / "example-hostname.cluster-pid438776.log"
    path.write_text(VERBOSE + "\n" + P2P + "\n")
    # WHEN it is read
    rows, notes = parse_inspector_file(path)
    # THEN both become rows with NCCL's values; the rank is the one of the largest communicator
    assert is_inspector_file(path) and notes == []
    coll, p2p = rows
    assert (coll["op"], coll["kind"], coll["seq"], coll["bytes"], coll["dur_ns"]) == (
        "ReduceScatter", "coll", 1231, 2147483648, 41_057_000)
    assert coll["busbw_gbs"] == pytest.approx(366.134533) and coll["comm_name"] == "unknown"
    assert coll["start_ns"] == 1752867229235059000 and coll["dump_ns"] == 1752867229276385000
    assert (coll["host"], coll["pid"], coll["rank"], coll["comm_size"]) == ("example-hostname", 438776, 4, 8)
    assert (p2p["kind"], p2p["op"], p2p["peer"], p2p["start_ns"]) == ("p2p", "Send", 5, -1)


def test_parser_counts_cut_hostile_and_out_of_range_lines_without_raising(tmp_path: Path) -> None:
    # GIVEN good records mixed with a cut last line, garbage, deep nesting and values no column can hold
    good = json.loads(VERBOSE)
    bad_values = []
    for path_, value in ((("header", "rank"), 9), (("header", "rank"), True), (("coll_perf", "coll_sn"), -1),
                         (("coll_perf", "coll_exec_time_us"), 10**30), (("coll_perf", "coll"), "<script>x"),
                         (("header", "id"), "0x" + "f" * 400), (("metadata", "pid"), "438776")):
        record = json.loads(VERBOSE)
        record[path_[0]][path_[1]] = value
        bad_values.append(json.dumps(record))
    nan_bw = VERBOSE.replace('"coll_busbw_gbs":366.134533', '"coll_busbw_gbs":NaN')
    lines = [VERBOSE, "not json at all", "[" * 5000, '{"header":{}}', *bad_values, nan_bw, "x" * 200_000,
             json.dumps(good)[:120]]
    path = tmp_path / "h-pid1.log"
    path.write_text("\n".join(lines))
    # WHEN it is read
    rows, notes = parse_inspector_file(path)
    # THEN the two good records are kept (NaN bandwidth is unknown, not a number), every other line is counted
    assert len(rows) == 2 and rows[1]["busbw_gbs"] != rows[1]["busbw_gbs"]
    said = " ".join(n.message for n in notes)
    assert "12 line(s) are not complete NCCL Inspector records" in said and "cut to that length" in said


def test_parser_stops_at_the_file_cap_and_refuses_a_fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a file far over a small cap, and a FIFO named like Inspector output
    big = tmp_path / "h-pid2.log"
    big.write_text((VERBOSE + "\n") * 400)
    fifo = tmp_path / "h-pid3.log"
    os.mkfifo(fifo)
    monkeypatch.setenv("PERFTRACKER_MAX_FILE_BYTES", str(40 * len(VERBOSE)))
    # WHEN both are read
    rows, notes = parse_inspector_file(big)
    fifo_rows, fifo_notes = parse_inspector_file(fifo)
    # THEN the big file gives what lies under the cap (one seq repeated: one op) and a note; the FIFO a note
    assert 30 <= len(rows) <= 40 and any("cap" in n.message or "left out" in n.message for n in notes)
    assert fifo_rows == [] and "FIFO" in fifo_notes[0].message and not is_inspector_file(fifo)
    tables, _, _ = load_inspector_inputs([big])
    assert len(tables["nccl_collectives"]) == 1  # the same (process, communicator, seq) counted once


def test_straggler_fixture_names_rank_5_and_the_clean_one_is_quiet() -> None:
    # GIVEN the straggler and clean fixtures (rank 5 arrives 1.5 ms late at each collective in the first)
    slow, clean = Analysis(_store(_case("straggler"))), Analysis(_store(_case("clean")))
    # WHEN the Inspector analyzers judge them
    found = analyze_inspector_stragglers(slow)
    quiet = analyze_inspector_stragglers(clean) + analyze_inspector_bandwidth(clean) + analyze_inspector_bandwidth(slow)
    # THEN rank 5 on node-b is the one the others wait for, about 1.5 ms per collective; nothing else is said
    assert [(f.ranks, f.hosts) for f in found] == [((5,), ("node-b",))]
    lateness_ms = found[0].evidence["lateness_ms_per_collective"]
    assert lateness_ms > 1.2 and lateness_ms < 1.9 and (found[0].confidence or 0) > 0.99
    assert quiet == []
    view = inspector_lateness_view(slow)
    top = view[view["comm_name"] == "tp-node-b"].iloc[0]
    assert int(top["rank"]) == 5 and top["median_lateness_ms"] > 1.0


def test_bandwidth_drop_fixture_gives_the_collective_it_began_at() -> None:
    # GIVEN the fixture whose world AllReduce transfer takes 45% longer from step 12 on
    analysis = Analysis(_store(_case("bandwidth_drop")))
    # WHEN judged
    found = analyze_inspector_bandwidth(analysis) + analyze_inspector_stragglers(analysis)
    # THEN one finding: that AllReduce's bus bandwidth fell from about collective 12, on all 8 ranks
    assert len(found) == 1 and found[0].analyzer == "nccl_bandwidth"
    evidence = found[0].evidence
    assert evidence["op"] == "AllReduce" and abs(evidence["change_seq"] - 12) <= 1
    assert evidence["busbw_after_gbs"] < 0.75 * evidence["busbw_before_gbs"] and len(found[0].ranks) == 8
    assert set(inspector_bandwidth_view(analysis)["op"]) == {"AllGather", "AllReduce"}


def _peer_rows(slow_comm: str | None) -> pd.DataFrame:
    rows = []
    for c, hosts in enumerate((("a", "b"), ("c", "d"), ("e", "f"), ("b", "g"))):
        comm = f"0x{c + 1}"
        for seq in range(10):
            for i, host in enumerate(hosts):
                dur = 1000 * (1.5 if comm == slow_comm else 1.0) + 7 * ((seq + c) % 3) + 300 * i
                rows.append({"rank": 2 * c + i, "host": host, "pid": 2 * c + i, "comm_id": comm, "comm_name": f"dp{c}",
                             "comm_rank": i, "comm_size": 2, "kind": "coll", "op": "AllReduce", "seq": seq,
                             "bytes": 1 << 26, "dur_ns": int(dur * 1000), "busbw_gbs": 67.1 / (dur / 1000)})
    return conform("nccl_collectives", pd.DataFrame(rows))


def test_a_communicator_slower_than_its_peers_names_the_host_only_it_has() -> None:
    # GIVEN four 2-rank communicators moving 64 MiB, one of them (hosts b and g) 50% slower, and a clean set
    for slow, expected in (("0x4", [("g",)]), (None, [])):
        store = Store()
        store.set_table("nccl_collectives", _peer_rows(slow))
        # WHEN judged
        found = analyze_inspector_bandwidth(Analysis(store))
        # THEN the slow one names host g (b is also in a normal communicator); the clean set says nothing
        assert [f.hosts for f in found] == expected


def test_analyze_end_to_end_on_the_straggler_fixture(tmp_path: Path) -> None:
    # GIVEN the straggler fixture folder as a user has it (Inspector files only)
    out = tmp_path / "out"
    # WHEN `perftracker analyze` runs on it
    done = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(FIXTURES / "straggler"), "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    # THEN it names rank 5 in the verdict and findings.json, counts stragglers as judged, writes the view
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Rank 5 arrives last" in done.stdout
    document = json.loads((out / "findings.json").read_text())
    assert [f["ranks"] for f in document["findings"] if f["analyzer"] == "nccl_straggler"] == [[5]]
    judged = {a["area"]: a["from"] for a in document["summary"]["coverage"]["judged"]}
    assert judged["stragglers and step time"] == ["NCCL Inspector"]
    assert (out / "tables" / "inspector_lateness.parquet").is_file()


def test_run_directory_copy_and_job_file_of_one_process_count_once(tmp_path: Path) -> None:
    # GIVEN a run directory holding the live copy (inspector/) and the job's own file of the same processes
    run = tmp_path / "run"
    for folder in (run / "inspector", run / "nccl-inspector-unknown-jobid"):
        folder.mkdir(parents=True)
        for path in _case("clean")[:2]:
            (folder / path.name).write_text(path.read_text())
    # WHEN the run directory is loaded
    store = load_path(run, LoadOptions(cache_dir=None, workers=1))
    # THEN each operation is there once, and a note says the records were in two files
    table = store["nccl_collectives"]
    assert len(table) == len(table.drop_duplicates(["pid", "comm_id", "seq"])) == 2 * 48
    assert any("more than one file" in n.message for n in store.notes)


def test_two_ranks_late_together_are_one_finding_naming_both() -> None:
    # GIVEN one 8-rank communicator whose ranks 2 and 3 (one host) arrive 1 ms late at each of 40 collectives
    rows = []
    for seq in range(40):
        for rank in range(8):
            late_us = 1000 if rank in (2, 3) else 0
            jitter_us = 20 * ((seq * 7 + rank * 3) % 5)
            rows.append({"rank": rank, "host": "n1" if rank in (2, 3) else "n0", "pid": rank, "comm_id": "0xa",
                         "comm_name": "world", "comm_rank": rank, "comm_size": 8, "kind": "coll", "op": "AllReduce",
                         "seq": seq, "bytes": 1 << 24, "dur_ns": (3000 - late_us + jitter_us) * 1000,
                         "dump_ns": seq * 10**8})
    store = Store()
    store.set_table("nccl_collectives", conform("nccl_collectives", pd.DataFrame(rows)))
    # WHEN judged
    found = analyze_inspector_stragglers(Analysis(store))
    # THEN one finding names the pair and their host
    assert [(f.ranks, f.hosts) for f in found] == [((2, 3), ("n1",))]
    assert found[0].title.startswith("Ranks 2, 3 arrive last")
