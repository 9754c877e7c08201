"""Round three: flight-recorder dumps a careless or hostile input holds. The probes: a pickle of plain data JSON
cannot hold (a dict with a tuple key, bytes: exit 70); a second dump claiming rank 0 (an older attempt's) that
silently replaced rank 0's status (a critical "communication itself is stuck" became "No problems found");
ranks -5 and 1.5 read as rank 5 from the file name; one world group with half of 8,192 ranks missing (2.4 GB:
edges one by one) and one dump of a 64k-member group (145 s: the absent list re-sorted for every root rank)."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

from postmortem.frgen import T0, entry
from typer.testing import CliRunner

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.crash import analyze_crash
from perftracker.analyzers.failures.waitfor import Blocked, build
from perftracker.cli import app
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store


def _dump(rank: int | float | None, groups: dict[str, tuple[int, int]], config: dict[str, list[int]],
          shift_ns: int = 0, **extra: Any) -> dict[str, Any]:
    entries = [entry(seq, pg=pg, desc=f"GROUP_{pg}", state="scheduled")
               for pg, (enq, done) in groups.items() for seq in range(done + 1, enq + 1)]
    for e in entries:
        e["time_created_ns"] += shift_ns
        e.update(extra)
    body: dict[str, Any] = {
        "version": "2.10", "entries": entries,
        "pg_config": {pg: {"name": pg, "desc": f"GROUP_{pg}", "ranks": str(ranks)} for pg, ranks in config.items()},
        "pg_status": {pg: {"last_enqueued_collective": e, "last_started_collective": -1,
                           "last_completed_collective": d} for pg, (e, d) in groups.items()}}
    if rank is not None:
        body["rank"] = rank
    return body


def _load(folder: Path) -> Store:
    return load_path(folder, LoadOptions(cache_dir=None, workers=1))


STUCK = {"10": [0, 1], "11": [2, 3]}  # every member entered #5 and none completed it


def _stuck_job(folder: Path) -> None:
    for rank in range(4):
        pg = "10" if rank < 2 else "11"
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(_dump(rank, {pg: (5, 4)}, STUCK)))


def test_a_pickle_holding_what_json_cannot_is_read(tmp_path: Path) -> None:
    # GIVEN dumps whose entries hold input_sizes as a dict with a tuple key and output_sizes as bytes
    for rank in range(4):
        pg = "10" if rank < 2 else "11"
        body = _dump(rank, {pg: (5, 4)}, STUCK, input_sizes={(1, 2): [3]}, output_sizes=b"\x00\x01")
        body["pg_config"][pg][(7, 8)] = b"\xff"
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(body))
    # WHEN loaded and judged, and through `postmortem` THEN no crash: the stuck collective is named
    found = analyze_crash(Analysis(_load(tmp_path)))
    assert any("the communication itself is stuck" in f.title for f in found)
    result = CliRunner().invoke(app, ["postmortem", str(tmp_path), "-o", str(tmp_path.parent / "out")])
    assert result.exit_code == 0, result.output


def test_an_older_dump_claiming_rank_0_does_not_replace_its_status(tmp_path: Path) -> None:
    # GIVEN the stuck job, and beside it an older attempt's dump of rank 0 that saw everything complete
    _stuck_job(tmp_path)
    (tmp_path / "attempt0").mkdir()
    old = _dump(0, {"10": (5, 5)}, STUCK, shift_ns=-3_600 * 10**9)
    (tmp_path / "attempt0" / "nccl_trace_rank_0").write_bytes(pickle.dumps(old))
    # WHEN loaded and judged
    store = _load(tmp_path)
    found = analyze_crash(Analysis(store))
    # THEN the newest dump of rank 0 is read, the other left out with a note naming both; the finding holds
    assert any("communication itself is stuck" in f.title for f in found), [f.title for f in found]
    assert any("2 flight-recorder dumps claim rank 0" in n.message and "attempt0" in n.message for n in store.notes)


def test_two_dumps_of_one_rank_with_the_same_times_are_both_left_out_saying_so(tmp_path: Path) -> None:
    _stuck_job(tmp_path)
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "nccl_trace_rank_0").write_bytes(pickle.dumps(_dump(0, {"10": (5, 4)}, STUCK)))
    store = _load(tmp_path)
    assert any("cannot tell which" in n.message for n in store.notes)
    assert 0 not in {int(r) for r in store["collectives_fr"]["rank"]}


def test_a_rank_that_is_not_a_rank_is_not_taken_from_the_file_name(tmp_path: Path) -> None:
    # GIVEN dumps named rank_5 and rank_6 whose own 'rank' is -5 and 1.5
    for name, rank in (("nccl_trace_rank_5", -5), ("nccl_trace_rank_6", 1.5)):
        (tmp_path / name).write_bytes(pickle.dumps(_dump(rank, {"10": (5, 4)}, {"10": [5, 6]})))
    # WHEN loaded THEN neither becomes rank 5 or 6: rank -1, each with a note quoting its 'rank'
    store = _load(tmp_path)
    assert set(store["collectives_fr"]["rank"]) == {-1}
    assert sum("not a rank" in n.message for n in store.notes) == 2


def test_the_wait_graph_is_linear_in_ranks() -> None:
    # GIVEN one world group of 8,192 ranks, half of them missing from its stuck collective
    half = 4096
    blocked = Blocked("0", "default_pg", 5, "nccl:all_reduce", "", tuple(range(half)), tuple(range(half, 2 * half)),
                      (), T0)
    # WHEN the graph is built THEN its edges grow with the ranks (was 4096 x 4096), one root of 4096 ranks
    began = time.process_time()
    graph = build([blocked], [])
    assert sum(len(t) for t in graph.edges.values()) <= 2 * half + 2
    assert [(r.kind, len(r.ranks), len(r.behind)) for r in graph.roots] == [("missing", half, half)]
    assert graph.waiting == tuple(range(half))
    assert time.process_time() - began < 10


def test_one_dump_of_a_64k_member_group_is_judged_in_seconds(tmp_path: Path) -> None:
    # GIVEN rank 0's dump of a world group of 65,536 members: the others left none (145 s before)
    n = 1 << 16
    body = _dump(0, {"0": (5, 4)}, {"0": list(range(n))})
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(body))
    store = _load(tmp_path)
    began = time.process_time()
    found = analyze_crash(Analysis(store))
    # THEN the 65,535 ranks without a dump are one root, found in seconds, its evidence bounded
    assert time.process_time() - began < 40
    assert len(found[0].ranks) == n - 1 and len(found[0].evidence["last"]) <= 256
