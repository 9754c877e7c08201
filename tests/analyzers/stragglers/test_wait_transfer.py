"""Waiting and transfer at every collective, on real traces, against numbers computed here from the raw events.

The DLRM set (tests/fixtures/dlrm_kineto, facebookresearch/param, MIT) is 8 ranks of one V100 node, one
profiled step, 8 NCCL collectives (SendRecv and AllReduce) in which one rank (7) arrives last at 5: the
other ranks' kernels spin for milliseconds while the transfers themselves take microseconds.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view, step_waits_view
from perftracker.analyzers.traces.gpu_time import breakdown_view
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DLRM = FIXTURES / "dlrm_kineto"


@lru_cache(maxsize=1)
def _dlrm() -> Store:
    return load_path(DLRM, LoadOptions(workers=1))


def _raw_nccl_kernels() -> pd.DataFrame:
    """Every rank's NCCL kernels straight from the JSON files: rank, k (its k-th), ts and dur in us."""
    rows = []
    for path in sorted(DLRM.glob("*.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        rank = int(trace["distributedInfo"]["rank"])
        kernels = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"
                          and str(e.get("name", "")).startswith("nccl")), key=lambda e: float(e["ts"]))
        rows += [{"rank": rank, "k": k, "ts": float(e["ts"]), "dur": float(e["dur"])} for k, e in enumerate(kernels)]
    return pd.DataFrame(rows)


def test_dlrm_wait_and_transfer_match_the_raw_events() -> None:
    # GIVEN the 8-rank DLRM traces, and from the raw events: per collective, the last arrival, each rank's
    # wait (last arrival - own start, within its kernel) and transfer (the rest), the shortest duration
    raw = _raw_nccl_kernels()
    raw["last"] = raw.groupby("k")["ts"].transform("max")
    raw["wait"] = (raw["last"] - raw["ts"]).clip(lower=0).combine(raw["dur"], min)
    raw["transfer"] = raw["dur"] - raw["wait"]
    # WHEN the run is analyzed
    table = Analysis(_dlrm()).view(collective_split_view)
    # THEN all 8 collectives are matched on all 8 ranks, on aligned clocks
    assert table["instance"].nunique() == 8 and table["rank"].nunique() == 8
    assert set(table["basis"]) == {"aligned"}
    # AND on every rank wait + transfer is the kernel's duration, exactly
    assert (table["wait_ns"] + table["transfer_ns"] == table["dur_ns"]).all()
    # AND per rank, wait and transfer agree with the raw events (the aligned clocks differ from the raw ones by
    # at most a few microseconds per collective)
    mine = table.groupby("rank")[["wait_ns", "transfer_ns"]].sum() / 1e3
    theirs = raw.groupby("rank")[["wait", "transfer"]].sum()
    assert (mine["wait_ns"] - theirs["wait"]).abs().max() < 25
    assert (mine["transfer_ns"] - theirs["transfer"]).abs().max() < 25
    # AND the transfers add up to ~0.2 ms per rank (the sum of the shortest durations, as TraceLens measures
    # it: 217 us), while the ranks' NCCL kernels last 1.7 to 11.3 ms in all
    shortest = raw.groupby("k")["dur"].min().sum()
    assert shortest == pytest.approx(217, abs=1)
    assert (mine["transfer_ns"] - shortest).abs().max() < 15
    assert theirs["wait"].max() > 10_000


def test_dlrm_rank_7_causes_most_of_the_waiting() -> None:
    # GIVEN the DLRM traces; from the raw events, the rank arriving last at each collective
    raw = _raw_nccl_kernels()
    last = raw.loc[raw.groupby("k")["ts"].idxmax(), "rank"]
    assert int(last.value_counts().idxmax()) == 7 and int((last == 7).sum()) == 5
    # WHEN the waits per step are computed
    steps = Analysis(_dlrm()).view(step_waits_view).set_index("rank")
    # THEN rank 7 is the last at 5 collectives and caused the most rank-seconds of waiting
    assert int(steps["times_last"].idxmax()) == 7 and int(steps.loc[7, "times_last"]) == 5
    assert int(steps["caused_ns"].idxmax()) == 7
    # AND the waiting caused equals the waiting done (every wait is somebody's lateness)
    assert steps["caused_ns"].sum() == steps["wait_ns"].sum()


def test_dlrm_waiting_is_not_reported_as_exposed_communication() -> None:
    # GIVEN the DLRM traces, where ~98% of NCCL kernel time is waiting
    analysis = Analysis(_dlrm())
    # WHEN analyzed
    findings = costed_findings(analysis)
    table = analysis.view(breakdown_view)
    # THEN no exposed-communication finding (the transfers are ~0.2 ms of a ~16 ms step)
    assert not [f for f in findings if f.analyzer == "overlap"]
    # AND the breakdown counts the transfer as communication and the rest as waiting
    assert (table["comm_ns"] < 230_000).all()
    assert (table["comm_exposed_pct"] < 2.0).all()
    assert table["wait_exposed_pct"].median() > 20.0


def test_all_gather_is_sized_by_its_output_as_nccl_tests_does() -> None:
    # GIVEN the all-gather of a real B200 trace: 25136 elements in, 201088 out (8 ranks), bfloat16
    store = load_path(FIXTURES / "tracelens_b200", LoadOptions(workers=1))
    # WHEN loaded
    rows = store.events[store.events["collective"] == "all_gather"]
    # THEN the kernel and its op carry the output size, 8x the input (nccl-tests' S for busbw)
    assert len(rows) == 2 and set(rows["bytes"]) == {201088 * 2}


def test_dlrm_one_step_names_the_rank_waited_for_and_says_persistence_cannot_be_judged() -> None:
    # GIVEN the DLRM traces: one profiled step, rank 7 last at 5 of the 8 collectives
    findings = costed_findings(Analysis(_dlrm()))
    # WHEN the straggler analyzer reports
    measured = [f for f in findings if f.key.startswith("straggler:measured:")]
    # THEN one finding names rank 7 with the waiting it caused, what it did before, and the caveat
    assert len(measured) == 1 and measured[0].ranks == (7,)
    f = measured[0]
    assert f.evidence["times_last"] == 5 and f.evidence["steps"] == 1
    assert f.evidence["caused_rank_ms"] == pytest.approx(35.6, abs=0.5)  # the others' waiting, summed
    assert "persistence cannot be judged" in f.title
    did = f.evidence["before_arrival"]
    assert did["collectives"] == 5 and did["interval_ms"] > did["median_rank_interval_ms"]
    assert did["top_extra_cpu"] and did["extra_cpu_ops_ms"] > 1.0


ACCURACY = FIXTURES / "accuracy"


def test_gloo_job_wait_and_transfer_match_the_raw_events_and_the_late_rank_is_named_with_what_it_did() -> None:
    # GIVEN a real 4-rank torchrun gloo job (CPU) of the accuracy corpus: rank 0 does 3x the forward's matmuls
    # in an `extra_work` region before every gradient all-reduce; one host, so one clock
    store = load_path(ACCURACY / "inproc-rank0-x3-16", LoadOptions(workers=1))
    analysis = Analysis(store)
    # AND from the raw events: per step, each rank's arrival (its c10d::allreduce_ issue) and the end of its
    # gloo:all_reduce; wait = the last arrival - its own (within the op), transfer = the rest
    ev = store.events
    issue = ev[ev["name"] == "c10d::allreduce_"].sort_values("start_ns")
    run = ev[ev["name"] == "gloo:all_reduce"].sort_values("start_ns")
    raw = pd.DataFrame({"rank": issue["rank"].to_numpy(), "step": issue["step"].to_numpy(),
                        "arrival": issue["start_ns"].to_numpy()})
    raw["end"] = _ends(run, raw)
    raw = raw[raw["step"] >= 0]
    raw["wait"] = np.minimum((raw.groupby("step")["arrival"].transform("max") - raw["arrival"]).clip(lower=0),
                             raw["end"] - raw["arrival"])
    raw["transfer"] = raw["end"] - raw["arrival"] - raw["wait"]
    # WHEN analyzed
    table = analysis.view(collective_split_view)
    mine = table.set_index(["step", "rank"])[["wait_ns", "transfer_ns"]].sort_index()
    theirs = raw.set_index(["step", "rank"])[["wait", "transfer"]].sort_index()
    # THEN the gloo source is used and wait and transfer equal the raw numbers, exactly (one host, one clock)
    assert set(table["source"]) == {"gloo"}
    assert (mine["wait_ns"].to_numpy() == theirs["wait"].to_numpy()).all()
    assert (mine["transfer_ns"].to_numpy() == theirs["transfer"].to_numpy()).all()
    # AND rank 0 caused the waiting, and the finding names it with what it did: its extra_work region
    straggler = [f for f in costed_findings(analysis) if f.key == "straggler:0"]
    assert straggler and straggler[0].evidence["before_arrival"]["top_extra_cpu"][0]["name"] == "extra_work"
    assert straggler[0].evidence["before_arrival"]["extra_gpu_idle_ms"] == 0.0  # no GPU in this job


def _ends(run: pd.DataFrame, raw: pd.DataFrame) -> np.ndarray:
    """The end of each rank's k-th gloo:all_reduce, in the order of `raw` (each rank's k-th issue)."""
    ends = {}
    for rank, group in run.groupby("rank"):
        ends[int(rank)] = list((group["start_ns"] + group["dur_ns"]).to_numpy())
    out, seen = [], {}
    for rank in raw["rank"]:
        k = seen.get(int(rank), 0)
        seen[int(rank)] = k + 1
        out.append(ends[int(rank)][k])
    return np.array(out, dtype=np.int64)


def test_who_waits_for_whom_section_renders_the_views() -> None:
    # GIVEN the DLRM run's report views
    from perftracker.analyzers.views import report_tables
    from perftracker.reports.waits_section import waits_section

    tables = report_tables(Analysis(_dlrm()))
    # WHEN the section is built from them alone
    section = waits_section(tables, [])
    # THEN it shows the wait heatmap and the worst collectives, rank 7 first in its table
    assert section is not None and section.key == "waits" and len(section.figures) == 2
    assert section.data["table"]["rows"][0][0] == "7"
    worst = section.figures[1]["data"]
    waits = dict(zip(worst[0]["y"], worst[0]["x"]))
    # the worst collective is the first SendRecv, where rank 1 waited 7.62 ms for rank 7
    assert max(waits.values()) == pytest.approx(7.624, abs=0.01)


def test_nccl_inspector_records_are_split_by_the_shortest_duration() -> None:
    # GIVEN NCCL Inspector records of 8 ranks (generated from the documented format, tests/fixtures/inspector:
    # no start times), rank 5 computing 1.5 ms longer before each collective
    store = load_path(FIXTURES / "inspector" / "straggler", LoadOptions(workers=1))
    analysis = Analysis(store)
    # WHEN split
    table = analysis.view(collective_split_view)
    # THEN by the shortest duration (said so), exactly: wait + transfer = the kernel time, transfer = the
    # shortest kernel of the collective, and rank 5 caused nearly all the waiting
    assert set(table["basis"]) == {"shortest"} and set(table["source"]) == {"nccl_inspector"}
    assert (table["wait_ns"] + table["transfer_ns"] == table["dur_ns"]).all()
    assert (table["transfer_ns"] == table.groupby("instance")["dur_ns"].transform("min")).all()
    caused = analysis.view(step_waits_view).groupby("rank")["caused_ns"].sum()
    assert int(caused.idxmax()) == 5 and caused[5] > 0.9 * caused.sum()
