"""The Kineto what-if replay on a pipeline: per-group collectives, send/recv pairs, peers of the same stage.

GIVEN a hand-made step of a 2-stage x 2-replica pipeline in the shape the matching gives (`collective_split`
rows: each send/recv pair one instance of 2 members with `collective` send / recv, each DP all-reduce one
instance of its own group), with rank 0 (stage 0, replica 0) computing 20 ms where its DP peer rank 1 computes
10 ms. Exact ground truth: a recv completes 1 ms after its send starts; stage 1 computes 30 ms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perftracker import api
from perftracker.analyzers.stepgraph.replay import (
    fix_each_rank,
    idealize,
    replay,
    step_graph,
)

MS = 1_000_000


def _table() -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [  # instance, pg, collective, rank, arrival, dur, wait (ms); transfer = dur - wait
        (0, "pp0", "send", 0, 20, 1, 0), (0, "pp0", "recv", 2, 0, 21, 20),
        (1, "pp1", "send", 1, 10, 1, 0), (1, "pp1", "recv", 3, 0, 11, 10),
        (2, "dp0", "allreduce", 0, 21, 1, 0), (2, "dp0", "allreduce", 1, 11, 11, 10),
        (3, "dp1", "allreduce", 2, 51, 1, 0), (3, "dp1", "allreduce", 3, 41, 11, 10),
    ]
    table = pd.DataFrame(rows, columns=["instance", "pg", "collective", "rank", "arrival", "dur", "wait"])
    table["step"] = 1
    table["arrival_ns"] = table["arrival"] * MS
    table["dur_ns"] = table["dur"] * MS
    table["wait_ns"] = table["wait"] * MS
    table["transfer_ns"] = table["dur_ns"] - table["wait_ns"]
    steps = pd.DataFrame({"rank": [0, 1, 2, 3], "step": 1, "start_ns": 0, "dur_ns": [22 * MS, 22 * MS, 52 * MS, 52 * MS],
                          "source": "profiler"})
    return table, steps


def test_the_replay_follows_sends_and_group_collectives() -> None:
    # WHEN the step is replayed unchanged; THEN every rank's step time is the measured one
    table, steps = _table()
    graph = step_graph(table, steps, pd.Series(dtype=np.int64))
    out = replay(graph).steps.set_index("rank")
    assert out["replayed_ns"].to_dict() == pytest.approx(out["measured_ns"].to_dict())


def test_fixing_a_stage_0_rank_takes_its_dp_peers_work_not_its_receivers() -> None:
    # WHEN rank 0's work is set to its peers' (rank 1: same stage, same sequence of collectives)
    table, steps = _table()
    graph = step_graph(table, steps, pd.Series(dtype=np.int64))
    loc, tails = idealize(graph, 0)
    played = replay(graph, local=loc, tail=tails)
    fixed = played.steps.set_index("rank")["replayed_ns"]
    # THEN its send leaves at 10 ms and arrives at 11 ms (not at 1 ms: the receiver's 0 ms before its recv is
    # not rank 0's ideal compute); stage 1 ends 10 ms earlier, at 42 ms
    assert played.instances.set_index("instance")["end_ns"][0] == pytest.approx(11 * MS)
    assert fixed[2] == pytest.approx(42 * MS)
    assert fixed[0] == pytest.approx(12 * MS)


def test_the_ideal_keeps_each_stage_its_own_work() -> None:
    # WHEN every rank is idealized (OSDI'25's T_ideal)
    table, steps = _table()
    graph = step_graph(table, steps, pd.Series(dtype=np.int64))
    loc, tails = idealize(graph)
    ideal = replay(graph, local=loc, tail=tails).steps.set_index("rank")["replayed_ns"]
    # THEN stage 0 computes the mean of its replicas (15 ms), stage 1 still 30 ms after its recv: 15 + 1 + 30 + 1
    assert ideal[2] == pytest.approx(47 * MS) and ideal[3] == pytest.approx(47 * MS)


def test_fix_each_rank_names_the_slow_stage_0_rank() -> None:
    # WHEN each rank doing more than its peers is fixed in turn ("fix worker w: the step gets x shorter")
    table, steps = _table()
    per = fix_each_rank(step_graph(table, steps, pd.Series(dtype=np.int64))).set_index("rank")
    # THEN rank 0 (10 ms above its peer) comes first, and fixing it saves 10 ms on every rank: its DP peer no
    # longer waits for it at their all-reduce (12 ms), nor stage 1 at theirs (42 ms)
    assert per.index[0] == 0
    assert per.loc[0, "saved_ns"] == pytest.approx(10 * MS)
    assert per.loc[0, "s_w"] > 1.0


PIPELINE = Path(__file__).resolve().parents[2] / "fixtures" / "pipeline_gloo" / "slow_worker" / "traces"


@pytest.mark.skipif(not PIPELINE.is_dir(), reason="the recorded 2x2 gloo pipeline runs (tests/fixtures/pipeline_gloo)")
def test_a_real_pipeline_run_replays_exactly_and_costs_its_slow_worker() -> None:
    # GIVEN the real 2-stage x 2-replica gloo job (1F1B over isend/irecv, per-stage DP all-reduce) where rank 1
    # runs extra forward work; WHEN analyzed (send/recv matched as pairs, collectives inside their group)
    run = api.analyze(PIPELINE, cache=False)
    steps = run.tables["replay_steps"]
    # THEN the replay lands on the measured step times, and rank 1's cost comes from it
    waits = run.tables["collective_waits"]
    pairs = waits[waits["collective"].astype(str).isin(["send", "recv"])].groupby("instance")["rank"].size()
    if pairs.empty or (pairs != 2).any():
        pytest.skip("send/recv not matched as pairs here (before the process-group matching)")
    assert steps["error"].median() < 0.05
    slow = [f for f in run.findings if f.analyzer == "straggler" and f.ranks == (1,)]
    assert slow and slow[0].evidence["cost_source"] == "replay"
