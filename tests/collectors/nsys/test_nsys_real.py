"""Nsight Systems exports from public projects (tests/fixtures/nsys/SOURCES.md) analyzed like Kineto traces:
kernel counts and times per rank exact against SQL on the same file, NCCL kernels as communication, ranks
of one capture and of per-rank files matched and aligned, the top kernels named."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from api_helpers import analyzed
from nsys_fixtures import (
    CLOVER,
    MFU,
    SAXPY,
    add_nccl_init_payloads,
    keep_process,
    real_export,
    shift_clock,
    sql,
)

from perftracker.collectors.loading import LoadOptions, load_path

KERNELS_BY_PROCESS = ("SELECT (globalPid >> 24) & 16777215 AS pid, deviceId, count(*), sum(end - start), "
                      "sum(s.value LIKE 'ncclDevKernel%') FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                      "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1, 2 ORDER BY 2, 1")


def _gpu(store_events: pd.DataFrame) -> pd.DataFrame:
    return store_events[store_events["kind"].isin(["compute", "comm"]) & (store_events["stream"] >= 0)]


@pytest.mark.parametrize("name", [MFU, SAXPY, CLOVER])
def test_kernel_counts_and_times_per_rank_equal_sql(tmp_path: Path, name: str) -> None:
    # GIVEN a real export of one capture (one or two GPUs)
    path = real_export(name, tmp_path / "run")
    truth = sql(path, KERNELS_BY_PROCESS)
    # WHEN perftracker loads the folder
    store = load_path(tmp_path / "run", LoadOptions())
    # THEN each (process, GPU) is one rank whose kernels, their total time and NCCL kernels are SQL's
    ev = _gpu(store.events)
    ranks = sorted(int(r) for r in store.ranks["rank"])
    assert ranks == list(range(len(truth)))
    for rank, (_pid, _device, count, total, nccl) in zip(ranks, truth, strict=True):
        mine = ev[ev["rank"] == rank]
        assert len(mine) == count
        assert int(mine["dur_ns"].sum()) == total
        assert int((mine["kind"] == "comm").sum()) == nccl
        assert set(mine.loc[mine["kind"] == "comm", "comm_family"].astype(str)) <= {"nccl"}
    assert any("Nsight Systems export" in n.message and n.level == "info" for n in store.notes)


def test_two_ranks_of_one_capture_analyzed_matched_and_named(tmp_path: Path) -> None:
    # GIVEN the real 2-GPU FSDP capture (two torchrun workers in one nsys session, NCCL all-to-all)
    real_export(MFU, tmp_path / "run")
    # WHEN it is analyzed
    result = analyzed(tmp_path / "run", tmp_path / "out", cache=False)
    # THEN both ranks' 33 NCCL kernels are matched as collectives, communication is counted, kernels named
    titles = [f.title for f in result.findings]
    assert any("Matched 33 collectives across 2 ranks" in t for t in titles), titles
    breakdown = next(f for f in result.findings if f.title.startswith("GPU time"))
    assert "communication" in breakdown.title
    kernels = result.tables["kernels"].sort_values("total_ns", ascending=False)
    name, total = sql(tmp_path / "run" / MFU, "SELECT s.value, sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                      "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1 ORDER BY 2 DESC LIMIT 1")[0]
    assert (kernels.iloc[0]["name"], int(kernels.iloc[0]["total_ns"])) == (name, total)
    assert kernels.iloc[0]["launched_by"] == "flash_attn::_flash_attn_forward"  # the NVTX op range around its launch
    ops = result.store.events
    assert (ops["kind"] == "cpu_op").sum() > 1000  # autograd-nvtx op ranges
    assert "aten::addmm" in set(ops.loc[ops["kind"] == "cpu_op", "name"].astype(str))  # op_id tail dropped
    assert (result.out_dir / "report.html").is_file()


def test_per_rank_files_derived_from_a_real_capture_are_matched_and_aligned(tmp_path: Path) -> None:
    # GIVEN two per-rank files (DERIVED: the real 2-GPU capture split by process, as
    # `nsys profile -o rank_%q{RANK}` writes one file per rank), named rank_0 and rank_1
    whole = real_export(MFU, tmp_path / "src")
    (tmp_path / "run").mkdir()
    keep_process(whole, tmp_path / "run" / "rank_1.sqlite", 145)
    keep_process(whole, tmp_path / "run" / "rank_0.sqlite", 144)
    shift_clock(tmp_path / "run" / "rank_1.sqlite", 7_000_000_000)  # rank 1's host clock reads 7 s later
    # WHEN they are loaded and analyzed
    result = analyzed(tmp_path / "run", tmp_path / "out", cache=False)
    # THEN the ranks come from the file names, each file's UTC base puts both on the same wall clock, and
    # their collectives match with the 7 s between the clocks found
    ranks = result.store.ranks.set_index("rank")
    assert sorted(ranks.index) == [0, 1]
    assert ranks.loc[0, "file"].endswith("rank_0.sqlite") and ranks.loc[1, "file"].endswith("rank_1.sqlite")
    assert int(ranks.loc[0, "base_ns"]) - int(ranks.loc[1, "base_ns"]) == 7_000_000_000
    walls = [int(ranks.loc[r, "base_ns"] + ranks.loc[r, "start_ns"]) for r in (0, 1)]
    assert abs(walls[0] - walls[1]) < 1_000_000_000 and walls[0] > 1_700_000_000 * 10**9
    matched = next(f for f in result.findings if "Matched 33 collectives across 2 ranks" in f.title)
    assert "clock skew" in matched.title
    truth = sql(whole, KERNELS_BY_PROCESS)
    ev = _gpu(result.store.events)
    assert [len(ev[ev["rank"] == r]) for r in (0, 1)] == [truth[0][2], truth[1][2]]


def test_steps_from_a_chosen_nvtx_range_of_a_real_export(tmp_path: Path) -> None:
    # GIVEN the real capture, whose only repeating top-level range is the op range AllToAll4D
    path = real_export(MFU, tmp_path / "run")
    per_pid = dict(sql(path, "SELECT (globalTid >> 24) & 16777215, count(*) FROM NVTX_EVENTS n "
                   "WHERE n.text LIKE 'AllToAll4D,%' GROUP BY 1"))
    # WHEN it is loaded with that range chosen as the step range
    store = load_path(tmp_path / "run", LoadOptions(nsys_step_range="AllToAll4D"))
    # THEN each rank has one step per such range, numbered in order, and its kernels carry their steps
    steps = store.steps
    assert steps.groupby("rank").size().tolist() == [per_pid[144], per_pid[145]]
    assert set(steps["source"].astype(str)) == {"nvtx"}
    assert (store.events["step"] >= 0).sum() > 0


def test_ranks_from_nccl_payloads_win_over_device_order(tmp_path: Path) -> None:
    # GIVEN the real 2-GPU capture with NCCL communicator-init payloads added (DERIVED: the file's own payload
    # schema, values made up) saying process 144 (GPU 0) is rank 1 and process 145 (GPU 1) rank 0 of 2
    path = real_export(MFU, tmp_path / "run")
    add_nccl_init_payloads(path, {144: (1, 2, 0), 145: (0, 2, 1)})
    truth = dict(((pid, n) for pid, _dev, n, _t, _c in sql(path, KERNELS_BY_PROCESS)))
    # WHEN it is loaded
    store = load_path(tmp_path / "run", LoadOptions())
    # THEN the payload's ranks and world size are used, and said
    ev = _gpu(store.events)
    assert [len(ev[ev["rank"] == r]) for r in (0, 1)] == [truth[145], truth[144]]
    assert sorted(store.ranks["world_size"]) == [2, 2]
    assert any("is rank 1 of 2 (from NCCL's payload)" in n.message for n in store.notes)


def test_payload_schemas_without_values_are_said(tmp_path: Path) -> None:
    # GIVEN the real capture, exported without blobs WHEN loaded THEN a note says how to keep NCCL's payloads
    real_export(MFU, tmp_path / "run")
    store = load_path(tmp_path / "run", LoadOptions())
    assert any("--include-blobs=true" in n.message and n.level == "info" for n in store.notes)
