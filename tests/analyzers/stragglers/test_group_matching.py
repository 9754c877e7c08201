"""Collectives matched inside their process group, P2P as pairs: on real 4-rank gloo jobs recorded here.

The jobs (tests/fixtures/group_jobs, `scripts/record_group_jobs.py`) run tensor-parallel groups {0,1},{2,3},
data-parallel groups {0,2},{1,3} and the world side by side, or pipeline-like isend/irecv pairs. Their traces
carry no group on any event (gloo emits no record_param_comms): each group comes from pg_config and gloo's
per-group worker threads. Before this, every all_reduce was matched across all 4 ranks by position, and every
send with every recv as a 4-rank collective.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perftracker import api
from perftracker.analyzers.stragglers.collectives import MatchReport, aligned_arrivals
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

JOBS = Path(__file__).resolve().parents[2] / "fixtures" / "group_jobs"


def _truth(case: str) -> dict[str, Any]:
    text = (JOBS / case / "job.md").read_text(encoding="utf-8")
    found = re.search(r"```json\n(.*?)```", text, re.S)
    assert found
    result: dict[str, Any] = json.loads(found.group(1))
    return result


@lru_cache(maxsize=4)
def _store(case: str) -> Store:
    return load_path(JOBS / case, LoadOptions(workers=1))


@lru_cache(maxsize=4)
def _matched(case: str) -> tuple[pd.DataFrame, MatchReport]:
    report = MatchReport()
    arr, _ = aligned_arrivals(_store(case), report)
    return arr, report


def _raw_ops(case: str, name: str) -> pd.DataFrame:
    """The main thread's c10d ops of one name straight from the JSON: rank, ts (us), input dims, concrete inputs."""
    rows = []
    for path in sorted((JOBS / case).glob("rank-*.pt.trace.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        rank = int(trace["distributedInfo"]["rank"])
        for e in trace["traceEvents"]:
            if e.get("ph") == "X" and e.get("name") == name:
                args = e.get("args", {})
                rows.append({"rank": rank, "ts": float(e["ts"]), "dims": json.dumps(args.get("Input Dims")),
                             "concrete": args.get("Concrete Inputs")})
    return pd.DataFrame(rows).sort_values(["rank", "ts"]).reset_index(drop=True)


@pytest.mark.parametrize("case", ["tp_dp", "tp_dp_slow"])
def test_no_instance_crosses_a_group_and_each_group_is_matched_apart(case: str) -> None:
    # GIVEN the real TP x DP job: every rank in one TP group, one DP group and the world
    truth = _truth(case)
    steps = truth["steps_profiled"]
    # WHEN its collectives are matched
    arr, report = _matched(case)
    groups = _store(case).run_info.process_groups
    # THEN every instance's members are exactly the members of the group it names (no 4-rank TP all_reduce)
    members = arr.groupby("instance").agg(pg=("pg", "first"), ranks=("rank", lambda r: tuple(sorted(r))))
    for pg, ranks in zip(members["pg"], members["ranks"]):
        assert ranks == tuple(sorted(groups[pg].ranks)), (pg, ranks)
    # ... and each group of the job has its own instances, as many as the job ran on it
    by_members = members.groupby("ranks").size().to_dict()
    for kind, sets in truth["groups"].items():
        for ranks in sets:
            assert by_members.get(tuple(ranks)) == truth["per_step"][kind] * steps, (kind, ranks)
    assert not report.fallback and report.alignment.mismatched == 0


def test_a_slow_rank_makes_only_its_own_groups_wait_by_the_raw_events() -> None:
    # GIVEN the TP x DP job with rank 1 doing 4x the layer compute
    truth = _truth("tp_dp_slow")
    slow = truth["slow_rank"]
    arr, _ = _matched("tp_dp_slow")
    tp = arr[arr["bytes"] == 64 * 256 * 4]
    # WHEN the waits at its tensor-parallel all_reduces are read
    # THEN in TP {0,1} rank 0 waits for rank 1 in nearly every instance, in TP {2,3} nobody waits for rank 1
    mine = tp[tp["rank"].isin([0, 1])]
    last = mine[mine["is_last"]]
    assert (last["rank"] == slow).mean() >= 0.75
    other = tp[tp["rank"].isin([2, 3])]
    assert other["wait_ns"].median() * 3 < mine[mine["rank"] == 0]["wait_ns"].median()
    # ... and rank 0's wait in each TP instance is, to the microsecond, rank 1's issue time minus rank 0's
    # from the raw c10d::allreduce_ ops of the activation (one host: one clock)
    raw = _raw_ops("tp_dp_slow", "c10d::allreduce_")
    raw = raw[raw["dims"] == json.dumps([[[64, 256]], [], [], [], [], []])]
    raw = raw.assign(k=raw.groupby("rank").cumcount())
    issue = raw.pivot(index="k", columns="rank", values="ts")
    expected = sorted(((issue[1] - issue[0]).clip(lower=0) * 1000).round().tolist())
    measured = sorted(mine[mine["rank"] == 0]["wait_ns"].tolist())
    assert len(measured) == len(expected) == truth["per_step"]["tp"] * truth["steps_profiled"]
    assert measured == pytest.approx(expected, abs=2_000)


def test_point_to_point_ops_are_pairs_and_the_receiver_waits_for_the_sender() -> None:
    # GIVEN the real pipeline-like job: isend/irecv and send/recv between ranks 0<->2 and 1<->3, rank 0's send
    # through the group {0,2} (its peer argument a group rank: 1)
    truth = _truth("p2p")
    arr, report = _matched("p2p")
    p2p = arr[arr["p2p"]]
    # WHEN matched
    # THEN every P2P instance has exactly two members, a send and a recv naming each other
    for _, pair in p2p.groupby("instance"):
        assert len(pair) == 2 and sorted(pair["collective"]) == ["recv", "send"]
        send, recv = pair[pair["collective"] == "send"].iloc[0], pair[pair["collective"] == "recv"].iloc[0]
        assert (send["peer"], recv["peer"]) == (recv["rank"], send["rank"])
        assert send["wait_ns"] == 0 and not pair["is_last"].any() and (pair["lateness_ns"] == 0).all()
        assert recv["wait_ns"] == max(0, send["start_aligned"] - recv["start_aligned"])
    pairs = p2p[p2p["collective"] == "send"].groupby(["rank", "peer"]).size().to_dict()
    assert pairs == {(s, r): truth["steps_profiled"] for s, r in truth["pairs"]}
    # ... the stage all_reduces are matched inside their stage, and no 4-rank instance exists
    assert set(arr[~arr["p2p"]].groupby("instance")["rank"].apply(lambda r: tuple(sorted(r)))) == {(0, 1), (2, 3)}
    assert report.p2p_paired == len(p2p)


def test_pairs_feed_no_clock_offset_and_raise_no_clock_note() -> None:
    # GIVEN the real P2P job on one host
    # WHEN analyzed
    run = api.analyze(JOBS / "p2p", cache=False, workers=1)
    # THEN no "different clocks" note, one clock for all ranks, and no fallback note (groups were known)
    keys = [f.key for f in run.findings]
    assert not [k for k in keys if k.startswith("straggler:clock-domains")]
    assert "straggler:matching:fallback" not in keys
    alignment = next(f for f in run.findings if f.key == "straggler:alignment")
    assert set(alignment.evidence["offsets_ns"].values()) == {0}


def test_without_any_group_the_fallback_is_said(tmp_path: Path) -> None:
    # GIVEN the TP x DP job with its traces' pg_config removed (an old trace: no group anywhere)
    run_dir = tmp_path / "nogroups"
    shutil.copytree(JOBS / "tp_dp", run_dir)
    for path in run_dir.glob("rank-*.pt.trace.json.gz"):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        trace["distributedInfo"].pop("pg_config", None)
        path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    # WHEN analyzed
    run = api.analyze(run_dir, cache=False, workers=1)
    # THEN the report says collectives were matched by name and order across all ranks, and why
    note = next(f for f in run.findings if f.key == "straggler:matching:fallback")
    assert "name and order across all ranks" in note.title and "no process group" in note.title


PIPELINE = Path(__file__).resolve().parents[2] / "fixtures" / "pipeline_gloo" / "clean" / "run-00"


def test_a_clean_pipeline_job_matches_stages_apart_and_raises_no_false_clock_or_straggler() -> None:
    # GIVEN a real clean 2-stage x 2-replica pipeline job (the `pipes` recording, Megatron order: DP groups
    # {0,1},{2,3} all_reduce once per step, 1F1B isend/irecv on the pipeline groups {0,2},{1,3})
    # WHEN analyzed (before: both DP all_reduces matched as one 4-rank collective, every send with every recv,
    # then "4 ranks read 2 different clocks" and "the others waited 407.8 ms for rank 2")
    run = api.analyze(PIPELINE, cache=False, workers=1)
    report = MatchReport()
    arr, _ = aligned_arrivals(load_path(PIPELINE, LoadOptions(workers=1)), report)
    # THEN the all_reduces are matched per stage, the P2P ops as pairs along the pipeline groups ...
    sets = arr.groupby("instance").agg(ranks=("rank", lambda r: tuple(sorted(r))), p2p=("p2p", "first"))
    assert set(sets[~sets["p2p"]]["ranks"]) == {(0, 1), (2, 3)}
    assert set(sets[sets["p2p"]]["ranks"]) == {(0, 2), (1, 3)}
    assert report.p2p_paired == report.p2p_events > 0
    # ... and the run is quiet: no clock note, nothing above info
    assert not [f.key for f in run.findings if f.key.startswith("straggler:clock-domains")]
    assert [f.title for f in run.findings if f.severity.label != "info"] == []
