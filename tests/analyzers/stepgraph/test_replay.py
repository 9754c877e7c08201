"""The cross-rank critical path and the what-if replay: exact ground truth, and a real trace with a known delay.

Synthetic (`benchmarks/synth.py`, for exact ground truth only): rank 2 does 1 ms more compute before each of 4
collectives per step; the simulation knows what that costs the step. Real: the DLRM set (tests/fixtures/
dlrm_kineto, facebookresearch/param, MIT; 8 V100 ranks, one profiled step) with a delay injected into the
trace files themselves: the rank that arrived last at a collective starts it D later, every other member's
kernel waits D longer, and everything after moves by D. Replaying the edited trace with that gap closed must
give back the step time measured on the unedited files.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HTA_TRACES

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.stepgraph.replay import replay
from perftracker.analyzers.thresholds import default

REL_TOL = default("replay.max_error")
from synth import SynthSpec, generate

from perftracker.analyzers.stepgraph.replay_costs import critical_path_view, replay_view
from perftracker.collectors.loading import LoadOptions, load_path

ROOT = Path(__file__).resolve().parents[3]
DLRM = ROOT / "tests" / "fixtures" / "dlrm_kineto"
GLOO = ROOT / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


def _synthetic(tmp_path: Path) -> tuple[Analysis, float]:
    truth = generate(SynthSpec(ranks=4, stragglers={2: 1000.0}, seed=1), tmp_path / "traces",
                     truth_path=tmp_path / "truth.json")
    return Analysis(load_path(tmp_path / "traces", LoadOptions(workers=1))), truth.stragglers[2].simulated_cost_us_per_step


def test_synthetic_straggler_cost_is_the_step_time_its_removal_saves(tmp_path: Path) -> None:
    # GIVEN 4 ranks, rank 2 with 1 ms extra compute before each of 4 collectives per step (noise 50 us)
    analysis, truth_us = _synthetic(tmp_path)
    # WHEN analyzed
    fit = analysis.view(replay_view)
    findings = costed_findings(analysis)
    # THEN the unchanged replay gives the measured step times back
    assert fit.error < 1e-6
    # AND the straggler's cost is the replayed saving of its peers' mean durations, equal to the simulation's
    straggler = next(f for f in findings if f.key == "straggler:2")
    assert straggler.evidence["cost_source"] == "replay"
    assert straggler.cost.seconds_per_step * 1e6 == pytest.approx(truth_us, rel=0.02)
    # AND exposed communication (none of it overlaps compute here) costs the transfers, replayed after the straggler
    exposed = next(f for f in findings if f.key == "overlap:exposed")
    assert exposed.evidence["cost_source"] == "replay"
    assert exposed.cost.seconds_per_step == pytest.approx(exposed.evidence["estimate_s"], rel=0.02)
    # AND every finding with a cost says where it came from, and the replayed costs add up below the step
    costed = [f for f in findings if f.cost.seconds_per_step > 0]
    assert costed and all(f.evidence["cost_source"] in ("replay", "estimate") for f in costed)
    assert sum(f.cost.share_of_step for f in costed if f.evidence["cost_source"] == "replay") <= 1.0
    # AND OSDI'25's slowdown is above 1 with the straggler in it
    assert fit.slowdown > 1.0 and 0.0 < fit.waste < 1.0


def test_synthetic_critical_path_runs_through_the_straggler_compute(tmp_path: Path) -> None:
    # GIVEN the same run
    analysis, _ = _synthetic(tmp_path)
    # WHEN its critical path is computed
    table = analysis.view(critical_path_view)
    path = table.groupby(["rank", "bound"])["path_ns"].sum()
    # THEN the path's compute is rank 2's (it arrives last at every collective), none of the others'
    compute = path.xs("gpu_compute", level="bound")
    assert compute.idxmax() == 2 and compute.drop(2).sum() == 0
    # AND the path's length per step is the replayed step time (within the launch slack before the first kernel)
    per_step = table.groupby("step")["path_ns"].sum()
    steps = analysis.view(replay_view).replay.step_times().set_index("step")["replayed_ns"]
    assert np.allclose(per_step.to_numpy(float), steps.reindex(per_step.index).to_numpy(float), rtol=0.01)
    # AND the others' waiting is attributed to rank 2
    waits = table[table["bound"] == "wait"]
    assert set(waits["for_rank"]) == {2} and 2 not in set(waits["rank"])


def _edit(src: Path, dst: Path, delay_us: float) -> tuple[int, int]:
    """Copy the DLRM traces to `dst` with `delay_us` injected before the collective that costs the most
    waiting, on the rank that arrived last there; returns (that rank, the collective's index k)."""
    traces = {p.name: json.loads(gzip.decompress(p.read_bytes())) for p in sorted(src.glob("*.json.gz"))}
    nccl: dict[int, list[dict[str, Any]]] = {}
    for doc in traces.values():
        rank = int(doc["distributedInfo"]["rank"])
        nccl[rank] = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                             and str(e.get("name", "")).startswith("nccl")), key=lambda e: float(e["ts"]))
    count = min(len(v) for v in nccl.values())
    # The k-th kernel of every rank is one collective; the same clock (one host); the last arrival waits least.
    k = max(range(count), key=lambda i: sum(float(nccl[r][i]["dur"]) for r in nccl)
            - len(nccl) * min(float(nccl[r][i]["dur"]) for r in nccl))
    late = max(nccl, key=lambda r: float(nccl[r][k]["ts"]))
    for name, doc in traces.items():
        rank = int(doc["distributedInfo"]["rank"])
        kernel = nccl[rank][k]
        cut = float(kernel["ts"]) if rank == late else float(kernel["ts"]) + float(kernel["dur"])
        if rank != late:
            kernel["dur"] = float(kernel["dur"]) + delay_us
        for ev in doc["traceEvents"]:
            if (ev is kernel and rank != late) or "ts" not in ev:
                continue
            ts = float(ev["ts"])
            if ts >= cut:
                ev["ts"] = ts + delay_us
            elif ev.get("ph") == "X" and ts + float(ev.get("dur", 0)) > cut:
                ev["dur"] = float(ev["dur"]) + delay_us  # an enclosing span (the step) grows
        (dst / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return late, k


def test_real_trace_closing_an_injected_gap_gives_back_the_measured_step(tmp_path: Path) -> None:
    # GIVEN the real DLRM traces, and a copy with 3 ms injected before its costliest collective on its last rank
    delay_ns = 3_000_000
    late, _ = _edit(DLRM, tmp_path, delay_ns / 1e3)
    original = Analysis(load_path(DLRM, LoadOptions(workers=1))).view(replay_view)
    edited = Analysis(load_path(tmp_path, LoadOptions(workers=1))).view(replay_view)
    measured = float(original.replay.step_times()["measured_ns"].mean())
    measured_edited = float(edited.replay.step_times()["measured_ns"].mean())
    assert measured_edited - measured == pytest.approx(delay_ns, rel=0.01)  # the edit is what it says
    # WHEN the edited trace is replayed as it is, and with the injected gap closed on that rank
    nodes = edited.graph.nodes
    local = nodes["local_ns"].to_numpy(np.float64).copy()
    mine = np.flatnonzero((nodes["rank"] == late).to_numpy() & (nodes["local_ns"] >= delay_ns).to_numpy())
    node = mine[np.argmax(nodes["local_ns"].to_numpy()[mine])]
    local[node] -= delay_ns
    closed = replay(edited.graph, local=local).mean_step_ns()
    # THEN both replays are within the 5% the costs rely on, and closing the gap gives back the unedited step
    assert original.error <= REL_TOL and edited.error <= REL_TOL
    assert closed == pytest.approx(measured, rel=0.01)


def test_real_gloo_straggler_named_with_a_replayed_cost() -> None:
    # GIVEN the real 4-rank gloo job whose rank 2 runs a 5x forward
    analysis = Analysis(load_path(GLOO, LoadOptions(workers=1)))
    # WHEN analyzed
    fit = analysis.view(replay_view)
    named = [f for f in costed_findings(analysis) if f.ranks == (2,) and f.cost.seconds_per_step > 0]
    # THEN the replay fits the measured steps and the straggler's cost comes from it, below the step time
    assert fit.error <= REL_TOL
    assert named and named[0].evidence["cost_source"] == "replay"
    assert 0.0 < named[0].cost.share_of_step < 1.0
    assert named[0].evidence["estimate_s"] > 0


def test_report_shows_the_critical_path_the_costs_and_the_replay_error(tmp_path: Path) -> None:
    # GIVEN the real DLRM traces (one step; rank 7 the others wait for; communication mostly waiting)
    from api_helpers import analyzed

    # WHEN analyzed end to end
    result = analyzed(DLRM, tmp_path / "out", cache=False, workers=1)
    # THEN the run summary carries the replay's error, within 5% here
    summary = result.tables["run_summary"].iloc[0]
    assert summary["replay_steps"] == 1 and summary["replay_error"] <= REL_TOL
    # AND findings.json says, for every finding with a cost, whether it came from the replay
    saved = json.loads((tmp_path / "out" / "findings.json").read_text(encoding="utf-8"))["findings"]
    costed = [f for f in saved if f["cost"]["seconds_per_step"] > 0]
    assert costed and all(f["evidence"]["cost_source"] in ("replay", "estimate") for f in costed)
    # AND the critical path runs mostly through rank 7, and the page shows the section
    path = result.tables["critical_path"].groupby("rank")["path_ns"].sum()
    assert path.idxmax() == 7
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Critical path and what-if costs" in page and "What each finding costs" in page
    # AND the section draws the op-level path, with each rank's own step time and whom it waited for (rank 7)
    ops = result.tables["critical_path_ops"]
    assert (ops["path_ns"] > 0).any() and "Each rank's own step time" in page and "rank 7" in page


@pytest.mark.skipif(not (HTA_TRACES / "trace_filter").is_dir(), reason="the shared HTA corpus is not here")
def test_a_replay_off_by_more_than_5_percent_keeps_the_estimates_and_says_so() -> None:
    # GIVEN HTA's trace_filter folder: two traces of one rank filtered two ways, not two ranks of one job
    analysis = Analysis(load_path(HTA_TRACES / "trace_filter", LoadOptions(workers=1)))
    # WHEN analyzed
    fit = analysis.view(replay_view)
    findings = costed_findings(analysis)
    # THEN the replay does not fit, and the findings it would have costed keep their own estimate, saying why
    assert fit.error > REL_TOL
    kept = [f for f in findings if f.key in ("overlap:exposed", "straggler:measured:1")]
    assert kept and all(f.evidence["cost_source"] == "estimate" and "off the measured" in f.evidence["cost_note"]
                        for f in kept)
