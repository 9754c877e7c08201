"""Each rank's compute per step from its ops (`op_work`), and the compute test built on it.

Promise checked: an op's own time is its duration less its direct children's; on CPU traces each op counts at the
shortest own time it took anywhere (same name and shapes), so ranks running the same ops show the same compute
however the scheduler stretched them, and a rank running extra ops shows exactly their cost more; with GPU compute
kernels present their durations are summed instead; the durations test on these values names a rank with a steady
10% excess and stays quiet on identical ranks. Small hand-made event tables (synthetic, so the truth is exact); the
real recorded runs are checked in tests/analyzers/stragglers/test_excess_corpus.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perftracker.analyzers.stragglers.op_work import compute_trials, op_costs, self_times, trials_of
from perftracker.analyzers.stragglers.significance import judge_durations
from perftracker.analyzers.thresholds import threshold


def _op(rank: int, step: int, name: str, start: int, dur: int, dims: str = "[[8,8]]", kind: str = "cpu_op",
        tid: int = 1) -> dict[str, object]:
    return {"rank": rank, "step": step, "name": name, "start_ns": start, "dur_ns": dur, "input_dims": dims,
            "kind": kind, "tid": tid}


def test_own_time_is_the_duration_less_the_direct_children() -> None:
    # GIVEN a linear op (100 ns) holding an addmm (80 ns) that holds a copy (10 ns), then a relu (5 ns)
    ev = pd.DataFrame([_op(0, 0, "aten::linear", 0, 100), _op(0, 0, "aten::addmm", 10, 80),
                       _op(0, 0, "aten::copy_", 20, 10), _op(0, 0, "aten::relu", 200, 5)])
    # WHEN their own times are taken
    own = self_times(ev)
    # THEN each op keeps what its children did not take: 20, 70, 10 and 5 ns
    assert own.tolist() == [20, 70, 10, 5]


def test_same_ops_stretched_by_the_scheduler_show_the_same_compute() -> None:
    # GIVEN two steps of three ranks running the same two ops, with wall durations stretched up to 10x by
    # descheduling on some ranks and steps (as on a CPU shared by more threads than cores)
    rng = np.random.default_rng(1)
    rows = []
    for rank in range(3):
        for step in range(2):
            stretch = rng.uniform(1.0, 10.0, size=2)
            rows += [_op(rank, step, "aten::addmm", 10_000 * step, int(300 * stretch[0])),
                     _op(rank, step, "aten::relu", 10_000 * step + 5000, int(20 * stretch[1]), dims="[[8]]")]
    base = pd.DataFrame(rows)
    ev = pd.DataFrame(rows + [_op(2, 1, "aten::addmm", 50_000, 300), _op(1, 0, "aten::relu", 60_000, 20, dims="[[8]]")])
    # WHEN the compute per step is taken from the runs without and with the two extra ops
    grid = compute_trials(base).pivot_table(index="trial", columns="rank", values="value")
    # THEN every rank shows the same compute in every step (each op at its shortest time anywhere)
    assert grid.nunique(axis=1).eq(1).all(), grid
    # AND with one extra addmm on rank 2 in step 1 (300 ns, the shortest) and a relu on rank 1 in step 0, those
    # cells show exactly that much more, counted at the shortest times (300 and 20 ns)
    more = compute_trials(ev).pivot_table(index="trial", columns="rank", values="value")
    assert more.loc[1, 2] - more.loc[1, 0] == pytest.approx(300)
    assert more.loc[0, 1] - more.loc[0, 0] == pytest.approx(20)


def test_gpu_compute_kernels_are_summed_and_cpu_ops_left_out() -> None:
    # GIVEN two ranks with compute kernels (and CPU launch ops, and a communication kernel)
    ev = pd.DataFrame([_op(0, 0, "gemm", 0, 100, kind="compute"), _op(0, 0, "gemm", 200, 120, kind="compute"),
                       _op(1, 0, "gemm", 0, 150, kind="compute"), _op(0, 0, "cudaLaunchKernel", 0, 9),
                       _op(1, 0, "ncclKernel_AllReduce", 300, 900, kind="comm")])
    # WHEN the compute per step is taken, from the ranks' events one rank at a time
    trials = trials_of(pd.concat([op_costs(ev[ev["rank"] == r]) for r in (0, 1)], ignore_index=True))
    # THEN it is each rank's compute-kernel time: 220 and 150 ns
    assert dict(zip(trials["rank"], trials["value"])) == {0: 220, 1: 150}


def test_compute_test_names_a_steady_excess_and_not_identical_ranks() -> None:
    # GIVEN six steps of four ranks, rank 3 running 10% more compute in every step (values as the op costing
    # gives them: identical for ranks running the same ops)
    trial, rank = np.meshgrid(np.arange(6), np.arange(4), indexing="ij")
    values = np.full((6, 4), 10.0e6)
    clean = pd.DataFrame({"trial": trial.ravel(), "rank": rank.ravel(), "value": values.ravel()})
    values[:, 3] *= 1.10
    slowed = pd.DataFrame({"trial": trial.ravel(), "rank": rank.ravel(), "value": values.ravel()})
    # WHEN the durations test judges each as the compute test does
    named = judge_durations(slowed, alpha=0.0025, measure="compute", min_excess=threshold("straggler.compute_min_excess"))
    quiet = judge_durations(clean, alpha=0.0025, measure="compute", min_excess=threshold("straggler.compute_min_excess"))
    # THEN rank 3 is named with its 10% excess, and nobody among identical ranks
    assert named.significant and named.rank == 3 and named.relative_excess == pytest.approx(0.10)
    assert not quiet.significant and "compute" in quiet.reason
    # AND a 3% excess stays under the compute test's floor
    values[:, 3] = 10.3e6
    small = pd.DataFrame({"trial": trial.ravel(), "rank": rank.ravel(), "value": values.ravel()})
    assert not judge_durations(small, alpha=0.0025, measure="compute",
                               min_excess=threshold("straggler.compute_min_excess")).significant
