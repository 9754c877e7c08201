"""Expert parallelism: all-to-all split sizes, the rank-to-rank matrix, and the finding on a few heavy ranks.

On the real 4-rank gloo job of tests/fixtures/group_jobs/alltoall (`all_to_all_single` with uneven splits, rank
1 hosting the popular expert and computing on what it receives), and on record_param_comms' split arguments
as PyTorch writes them for NCCL (no public trace with non-empty splits was found: a minimal one is written here).
"""

from __future__ import annotations

import gzip
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.stragglers.expert_balance import alltoall_bytes_view, analyze_expert_balance
from perftracker.collectors.loading import LoadOptions, load_path

JOB = Path(__file__).resolve().parents[2] / "fixtures" / "group_jobs" / "alltoall"


@lru_cache(maxsize=1)
def _analysis() -> Analysis:
    return Analysis(load_path(JOB, LoadOptions(workers=1)))


def _truth() -> dict[str, Any]:
    found = re.search(r"```json\n(.*?)```", (JOB / "job.md").read_text(encoding="utf-8"), re.S)
    assert found
    result: dict[str, Any] = json.loads(found.group(1))
    return result


def test_the_rank_to_rank_matrix_is_the_jobs_splits() -> None:
    # GIVEN the real job: rank j sends SPLITS[j][i] rows of 256 floats to rank i, every step
    truth = _truth()
    steps = truth["steps_profiled"]
    # WHEN the all-to-all matrix is read
    table = alltoall_bytes_view(_analysis())
    # THEN each (sender, receiver) cell holds the rows the job sent over the profiled steps, and their bytes
    cells = {(int(s), int(r)): (int(n), int(b)) for s, r, n, b in
             table[["sender", "receiver", "rows", "bytes"]].itertuples(index=False)}
    expected = {(j, i): (truth["splits"][j][i] * steps, truth["splits"][j][i] * steps * 256 * 4)
                for j in range(4) for i in range(4)}
    assert cells == expected


def test_a_rank_receiving_most_tokens_is_named_with_the_wait_it_causes() -> None:
    # GIVEN the same job: rank 1 receives 164 of 256 rows each step, then computes on them
    truth = _truth()
    popular = truth["popular_rank"]
    analysis = _analysis()
    # WHEN the expert-balance analyzer runs
    findings = analyze_expert_balance(analysis)
    # THEN one finding names rank 1 alone, its token share (164/256), and the imbalance (max / mean received)
    assert len(findings) == 1
    f = findings[0]
    received = [sum(row[i] for row in truth["splits"]) for i in range(4)]
    assert f.ranks == (popular,)
    assert f.evidence["token_share"] == pytest.approx(received[popular] / sum(received), abs=1e-3)
    assert f.evidence["imbalance_median"] == pytest.approx(max(received) / (sum(received) / 4), abs=1e-2)
    # ... and the wait it causes is what the matched instances say the others wait for rank 1 (per step)
    arr = analysis.view(arrivals_view).arrivals
    caused = arr[arr["is_last"] & (arr["rank"] == popular)]["gap_to_next_ns"].sum() / arr["step"].nunique()
    assert f.evidence["wait_caused_ms_per_step"] == pytest.approx(caused / 1e6, abs=1e-3)
    assert caused > 0


def test_no_finding_without_all_to_all_splits() -> None:
    # GIVEN the real TP x DP job (all_reduce only) WHEN analyzed THEN no expert-balance finding and an empty matrix
    analysis = Analysis(load_path(JOB.parent / "tp_dp", LoadOptions(workers=1)))
    assert analyze_expert_balance(analysis) == []
    assert alltoall_bytes_view(analysis).empty


def test_record_param_comms_groups_order_peers_and_splits_are_read(tmp_path: Path) -> None:
    # GIVEN a rank's trace with record_param_comms args as PyTorch 2.5+ writes them for NCCL (strings for lists,
    # `Seq`, `Dst Rank` for a send), kernels carrying the same args, and no pg_config naming group "7"
    def comms(ts: float, name: str, **extra: Any) -> dict[str, Any]:
        args = {"Collective name": name, "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024,
                "Group size": 2, "Process Group Name": "7", "Process Group Description": "EP",
                "Process Group Ranks": "[1, 3]", "In split size": "[]", "Out split size": "[]", **extra}
        return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 5,
                "args": args}
    events = [
        comms(10.0, "all_to_all", Seq=4, **{"In split size": "[100, 924]", "Out split size": "[512, 512]"}),
        comms(30.0, "send", Seq=5, **{"Dst Rank": 3}),
    ]
    doc = {"distributedInfo": {"rank": 1, "world_size": 4, "backend": "nccl"}, "traceEvents": events}
    (tmp_path / "rank-1.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    # WHEN loaded
    store = load_path(tmp_path, LoadOptions(workers=1))
    ev = store.select_events(lambda e: (e["name"] == "record_param_comms").to_numpy())
    ev = ev.sort_values("start_ns")
    # THEN the events carry their group, its own sequence number, the send's global peer and the splits ...
    assert list(ev["pg"].astype(str)) == ["7", "7"] and list(ev["seq"]) == [4, 5]
    assert list(ev["peer"]) == [-1, 3]
    assert json.loads(str(ev["splits"].iloc[0])) == [[100, 924], [512, 512]] and str(ev["splits"].iloc[1]) == ""
    # ... and the group table holds the group with its members
    group = store.run_info.process_groups["7"]
    assert (group.desc, group.size, group.ranks, group.source) == ("EP", 2, (1, 3), "record_param_comms")
    assert isinstance(ev, pd.DataFrame)
