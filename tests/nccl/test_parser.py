"""The NCCL log parser on the project's own fixtures: prefixes, formats, unknown lines, per-process files."""

from __future__ import annotations

import json
from pathlib import Path

from perftracker.collectors.nccl.log import load_nccl_logs, looks_like_nccl_log, parse_nccl_file
from perftracker.collectors.nccl.patterns import gid_prefix_is_link_local
from perftracker.values import strtoll_base0

from .conftest import FIXTURES

MIXED = FIXTURES / "mixed_job.log"


def _facts(path: Path) -> dict[tuple[str, int], dict[str, list[str]]]:
    rows, _ = parse_nccl_file(path)
    out: dict[tuple[str, int], dict[str, list[str]]] = {}
    for r in rows:
        out.setdefault((str(r["host"]), int(str(r["pid"]))), {}).setdefault(str(r["key"]), []).append(str(r["value"]))
    return out


def test_mixed_job_output_with_launcher_prefixes() -> None:
    # GIVEN a job's mixed output (mpirun, [Rank N], [155] prefixes, app lines, timestamps)
    facts = _facts(MIXED)
    # THEN every process is found under its own host:pid, with prefixes stripped
    assert {k for k in facts if k[1] >= 0} == {("nodeA", 1001), ("nodeA", 1002), ("nodeB", 2001), ("nodeB", 2002)}
    a = facts[("nodeA", 1001)]
    assert a["rank"] == ["0"]  # from the mpirun [1,0] prefix and the Init line
    assert facts[("nodeB", 2001)]["rank"] == ["2"]  # from [Rank 2]
    assert facts[("", -1)]["version"] == ["2.21.5"]  # the bare version line
    assert {json.loads(v)["hca"] for v in a["nic"]} == {"mlx5_1"}
    assert a["ib_ro"] == ["1"] and a["network"] == ["IB"]
    assert json.loads(a["oob"][0]) == {"iface": "eth0", "addr": "10.1.0.1"}
    assert "NET/IB/0/GDRDMA" in a["via"]
    init = json.loads(a["init_complete"][0])
    assert (init["comm_id"], init["nranks"], init["bus_id"]) == ("0xabc123", 4, "1b000")
    timings = json.loads(a["init_timings"][0])
    assert timings["total"] == 42.5 and timings["parts"]["bootstrap"] == 41.8
    assert {"NCCL_IB_TC=94", "NCCL_IB_TIMEOUT=22", "NCCL_IB_HCA=mlx5_1"} <= set(a["env"])
    qp = json.loads(a["qp"][0])
    assert qp["gid_index"] == 3 and qp["link_local"] is False
    assert facts[("nodeB", 2002)]["nnodes"] == ["2"]


def test_new_format_warn_completion_error_and_unknown_lines() -> None:
    # GIVEN >= 2.26 WARN lines with a timestamp and (func), a TRACE line and an unknown message
    b = _facts(MIXED)[("nodeB", 2001)]
    err = json.loads(b["completion_error"][0])
    # THEN the completion error's status, vendor error, peer, GIDs and HCA are extracted
    assert err == {"peer": "10.1.0.1", "status": 12, "opcode": "IBV_WC_RDMA_WRITE(1)", "vendor_err": 129,
                   "local_gid": "::ffff:10.1.0.2", "remote_gid": "::ffff:10.1.0.1", "hca": "mlx5_1"}
    assert b["warn"][0].startswith("transport/net_ib/p2p.cc:688 NET/IB: Got completion")
    assert json.loads(b["error_chain"][0]) == {"src": "transport/net.cc:1034", "code": 6, "thread": "Proxy Progress"}
    # AND an unknown message is kept, not fatal
    assert "Some brand new message NCCL 2.31 might print" in b["other"]


def test_rows_are_deduplicated_with_counts_and_warn_lines_counted() -> None:
    rows, config = parse_nccl_file(MIXED)
    warn_lines = [r for r in rows if r["key"] == "warn_lines"]
    assert warn_lines[0]["value"] == "2"  # same as grep -c "NCCL WARN"
    completion = [r for r in rows if r["key"] == "completion_error"]
    assert len(completion) == 1 and completion[0]["count"] == 2
    # AND the env echoes become config rows with their evidence line
    tc = [c for c in config if c["key"] == "NCCL_IB_TC"]
    assert tc[0]["value"] == "94" and tc[0]["rank"] == 0 and str(tc[0]["evidence"]).endswith(":17")


def test_per_process_debug_files_and_frames_conform() -> None:
    # GIVEN NCCL_DEBUG_FILE=%h.%p.log style files WHEN loaded THEN the frames conform to the schema
    paths = sorted((FIXTURES / "debug_files").glob("*.log"))
    frames, notes = load_nccl_logs(paths)
    assert not notes
    nccl = frames["nccl"]
    assert set(nccl["host"]) >= {"nodeC", "nodeD"}
    assert str(nccl["rank"].dtype) == "int32" and str(nccl["count"].dtype) == "int64"
    assert set(frames["config"]["source"]) == {"nccl_echo"}


def test_garbage_and_missing_files_are_not_fatal(tmp_path: Path) -> None:
    # GIVEN a binary file, an empty file and a missing file
    junk = tmp_path / "junk.log"
    junk.write_bytes(b"\x00\xff NCCL INFO \x80\x81 host:1:2 [x] NCCL WARN\n" * 10 + b"NCCL version\n")
    empty = tmp_path / "empty.log"
    empty.write_text("")
    frames, notes = load_nccl_logs([junk, empty, tmp_path / "missing.log"])
    # THEN notes explain, nothing raises
    assert any(n.level == "warning" and "missing.log" in n.source for n in notes)
    assert len(frames["nccl"]) >= 2


def test_looks_like_nccl_log(tmp_path: Path) -> None:
    other = tmp_path / "train.out"
    other.write_text("epoch 1 loss 0.5\n" * 100)
    assert looks_like_nccl_log(MIXED)
    assert not looks_like_nccl_log(other)
    assert not looks_like_nccl_log(tmp_path / "nope.log")


def test_strtoll_and_gid_helpers() -> None:
    # NCCL's strtoll(…, 0) semantics
    assert strtoll_base0("136") == (136, True)
    assert strtoll_base0("0136") == (94, True)
    assert strtoll_base0("0x88") == (136, True)
    assert strtoll_base0("136abc") == (136, False)
    assert strtoll_base0("abc") == (0, False)
    assert strtoll_base0(" 22")[0] == 22
    assert gid_prefix_is_link_local("80FE") and not gid_prefix_is_link_local("0")
