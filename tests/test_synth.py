"""The synthetic trace generator: its files load, and they say exactly what its ground truth says."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from synth import (
    GROUND_TRUTH,
    GroundTruth,
    SynthSpec,
    generate,
    main,
    read_ground_truth,
    tp_dp_groups,
)

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

RANKS = 8
STEPS = 3
SLOTS = 4


def _load(folder: Path) -> Store:
    return load_path(folder, LoadOptions(workers=1))


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[SynthSpec, GroundTruth, Store, Path]:
    """GIVEN 8 ranks in TP groups of 2 plus DP groups, a compute straggler (3), a comm straggler (5),
    random skews and a missing rank (6), generated and loaded with perftracker's loader."""
    root = tmp_path_factory.mktemp("synth")
    spec = SynthSpec(ranks=RANKS, steps=STEPS, kernels_per_step=16, collectives_per_step=SLOTS, step_us=20_000,
                     seed=7, stragglers={3: 1500.0}, comm_stragglers={5: 700.0}, groups=tp_dp_groups(RANKS, 2),
                     missing_ranks={6})
    truth = generate(spec, root / "traces")
    store = load_path(root / "traces", LoadOptions(workers=1))
    return spec, truth, store, root / "traces"


def test_files_load_with_the_right_ranks_and_steps(tp_run: tuple[SynthSpec, GroundTruth, Store, Path]) -> None:
    # WHEN the folder is loaded  THEN every written rank is there with its distributedInfo rank and all steps
    _, truth, store, folder = tp_run
    assert sorted(p.name for p in folder.glob("rank-*")) == sorted(truth.files)
    assert sorted(int(r) for r in store.ranks["rank"]) == truth.written_ranks == [0, 1, 2, 3, 4, 5, 7]
    assert set(store.ranks["world_size"]) == {RANKS}
    for rank, steps in store.steps.groupby("rank"):
        assert sorted(steps["step"]) == truth.steps, rank
    # ground_truth.json sits among the traces; at most it is noted as "not a trace".
    assert not [n for n in store.notes if n.level == "error" and not n.source.endswith(GROUND_TRUTH)]


def test_comm_kernels_per_rank_and_group(tp_run: tuple[SynthSpec, GroundTruth, Store, Path]) -> None:
    # THEN each rank has one NCCL kernel per slot per step, on its group's stream, in the right step
    _, truth, store, _ = tp_run
    ev = store.events
    comm = ev[ev["kind"] == "comm"]
    for rank in truth.written_ranks:
        mine = comm[comm["rank"] == rank]
        assert len(mine) == truth.comm_kernels_per_rank[rank] == STEPS * SLOTS
        assert (mine.groupby("step").size() == SLOTS).all()
        assert set(mine["collective"].astype(str)) == {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
    for name, group in truth.process_groups.items():
        rows = comm[comm["pg"].astype(str) == name]
        written = [r for r in group.ranks if r in truth.written_ranks]
        assert len(rows) == group.collectives * len(written)
        assert set(rows["stream"]) == {group.stream}
        assert set(rows["group_size"]) == {len(group.ranks)}
    assert sum(g.collectives for g in truth.process_groups.values()) == len(truth.instances)
    # Every kernel is launched: its correlation matches one cudaLaunchKernel on the same rank.
    launches = ev[ev["name"].astype(str) == "cudaLaunchKernel"]
    kernels = ev[ev["kind"].isin(["compute", "comm"])]
    assert len(launches) == len(kernels)
    assert (launches.groupby("rank")["correlation"].apply(set) == kernels.groupby("rank")["correlation"].apply(set)).all()


def test_collectives_end_at_one_true_time(tp_run: tuple[SynthSpec, GroundTruth, Store, Path]) -> None:
    # THEN for every instance, end - skew is equal (to the ns) on all members and equals the ground truth
    _, truth, store, _ = tp_run
    comm = store.events[store.events["kind"] == "comm"].copy()
    comm["pg"] = comm["pg"].astype(str)
    comm = comm.sort_values(["rank", "pg", "start_ns"])
    comm["seq"] = comm.groupby(["rank", "pg"]).cumcount()
    skew_ns = {r: round(s * 1000) for r, s in truth.skew_us.items()}
    comm["true_end"] = comm["start_ns"] + comm["dur_ns"] - comm["rank"].map(skew_ns)
    expected = {(i.pg, i.seq): round(i.end_true_us * 1000) for i in truth.instances}
    for key, rows in comm.groupby(["pg", "seq"]):
        pg, seq = str(key[0]), int(key[1])  # type: ignore[call-overload]
        assert rows["true_end"].nunique() == 1, (pg, seq)
        assert int(rows["true_end"].iloc[0]) == expected[(pg, seq)]
    # The raw ends differ by the skews (the analyzer has work to do).
    assert comm.groupby(["pg", "seq"])["start_ns"].apply(lambda s: s.nunique() > 1).any()


def test_stragglers_arrive_last_and_cost_what_the_truth_says(
        tp_run: tuple[SynthSpec, GroundTruth, Store, Path]) -> None:
    # THEN the compute straggler arrives last in all its collectives; the comm straggler's groups are slower
    _, truth, store, _ = tp_run
    s3 = truth.stragglers[3]
    assert s3.kind == "compute" and s3.extra_us == 1500 and s3.collectives_per_step == SLOTS
    assert s3.expected_cost_us_per_step == 1500 * SLOTS
    assert s3.share_last == 1.0 and s3.simulated_cost_us_per_step >= s3.expected_cost_us_per_step * 0.9
    mine = [i for i in truth.instances if 3 in truth.process_groups[i.pg].ranks]
    assert all(i.last_rank == 3 for i in mine)
    assert truth.comm_stragglers[5].expected_cost_us_per_step == 700 * SLOTS
    # The transfer part (true end - latest true arrival) is exactly 700 us longer in rank 5's groups.
    comm = store.events[store.events["kind"] == "comm"].copy()
    comm["pg"] = comm["pg"].astype(str)
    comm = comm.sort_values(["rank", "pg", "start_ns"])
    comm["seq"] = comm.groupby(["rank", "pg"]).cumcount()
    skew_ns = comm["rank"].map({r: round(v * 1000) for r, v in truth.skew_us.items()})
    comm["true_start"] = comm["start_ns"] - skew_ns
    comm["true_end"] = comm["start_ns"] + comm["dur_ns"] - skew_ns
    per = comm.groupby(["pg", "seq"]).agg(arrive=("true_start", "max"), end=("true_end", "first"))
    slot = {(i.pg, i.seq): i.slot for i in truth.instances}
    transfer: dict[tuple[int, bool], set[int]] = {}
    for pg, seq, arrive, end in zip(per.index.get_level_values(0), per.index.get_level_values(1),
                                    per["arrive"], per["end"]):
        group = truth.process_groups[str(pg)].ranks
        if all(r in truth.written_ranks for r in group):  # the latest arrival is visible
            transfer.setdefault((slot[(str(pg), int(seq))], 5 in group), set()).add(int(end - arrive))
    compared = [c for c in range(SLOTS) if (c, True) in transfer and (c, False) in transfer]
    assert compared == [0, 2]  # the TP slots (the DP group without rank 5 lacks rank 6's trace)
    for c in compared:
        (with5,), (without5,) = transfer[(c, True)], transfer[(c, False)]
        assert with5 - without5 == 700_000


def test_ground_truth_file_matches(tp_run: tuple[SynthSpec, GroundTruth, Store, Path]) -> None:
    # THEN ground_truth.json holds what generate returned, and its totals match the files
    spec, truth, store, folder = tp_run
    data = read_ground_truth(folder)
    assert data == json.loads(json.dumps(truth.to_dict()))
    assert data["format"] == "perftracker-synth-ground-truth"
    assert data["missing_ranks"] == [6] and "rank-6.pt.trace.json.gz" not in data["files"]
    assert set(data["skew_us"]) == {str(r) for r in range(RANKS)}
    assert all(abs(v) <= spec.max_skew_us for v in data["skew_us"].values())
    assert data["events_complete"] == len(store.events)
    total = sum(len(json.loads(gzip.decompress((folder / f).read_bytes()))["traceEvents"]) for f in data["files"])
    assert data["events_total"] == total
    assert data["bytes_json"] == sum(len(gzip.decompress((folder / f).read_bytes())) for f in data["files"])


def test_same_seed_same_bytes_and_explicit_skew(tmp_path: Path) -> None:
    # GIVEN one world group, explicit skews and no noise  WHEN generated twice
    spec = SynthSpec(ranks=3, steps=2, kernels_per_step=8, step_us=10_000, skew_us={0: 0.0, 1: 1234.567, 2: -50.0},
                     noise_us=0.0, stragglers={2: 400.0})
    a = generate(spec, tmp_path / "a", gzip=False)
    generate(spec, tmp_path / "b", gzip=False)
    # THEN the files are identical, plain JSON, and every rank's raw end is the true end plus its skew
    for name in a.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert a.files == ["rank-0.pt.trace.json", "rank-1.pt.trace.json", "rank-2.pt.trace.json"]
    assert a.skew_us == {0: 0.0, 1: 1234.567, 2: -50.0}
    assert list(a.process_groups) == ["0"] and a.process_groups["0"].desc == "default_pg"
    store = _load(tmp_path / "a")
    comm = store.events[store.events["kind"] == "comm"].sort_values(["rank", "start_ns"])
    ends = (comm["start_ns"] + comm["dur_ns"]).to_numpy().reshape(3, -1)
    assert list(ends[1] - ends[0]) == [1_234_567] * ends.shape[1]
    assert list(ends[2] - ends[0]) == [-50_000] * ends.shape[1]
    # No noise: after the first collective (ranks start up to 200 us apart) the straggler costs exactly its extra.
    assert all(i.last_rank == 2 for i in a.instances)
    assert all(i.wait_caused_us == pytest.approx(400.0) for i in a.instances[1:])
    assert a.stragglers[2].simulated_cost_us_per_step == pytest.approx(
        sum(i.wait_caused_us for i in a.instances) / 2)
    assert a.stragglers[2].expected_cost_us_per_step == 400.0 * 4


def test_target_size_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN the CLI asks for ~0.3 MB per rank  THEN the files are about that size and the truth names the straggler
    assert main(["--ranks", "2", "--out", str(tmp_path / "o"), "--straggler", "1:2000", "--comm-straggler", "0:10",
                 "--seed", "3", "--target-mb", "0.3", "--steps", "2"]) == 0
    data = read_ground_truth(tmp_path / "o")
    assert 0.25e6 < data["bytes_json"] / 2 < 0.35e6
    assert data["stragglers"]["1"]["extra_us"] == 2000 and data["spec"]["seed"] == 3
    assert "wrote 2 rank traces" in capsys.readouterr().out
    assert (tmp_path / "o" / GROUND_TRUTH).exists()
    # Bad input is one line and exit 2.
    assert main(["--ranks", "2", "--out", str(tmp_path / "x"), "--straggler", "5:10"]) == 2


def test_step_boundaries_hold_every_event(tp_run: tuple[SynthSpec, GroundTruth, Store, Path]) -> None:
    # THEN every kernel and CPU event falls in a step, and CPU events on the one thread never overlap
    _, _, store, _ = tp_run
    ev = store.events
    assert (ev["step"] >= 0).all()
    cpu = ev[(ev["stream"] < 0) & ~ev["name"].astype(str).str.startswith("ProfilerStep")]
    for _, rows in cpu[cpu["kind"].isin(["cpu_op"])].groupby("rank"):
        rows = rows.sort_values("start_ns")
        assert ((rows["start_ns"] + rows["dur_ns"]).to_numpy()[:-1] <= rows["start_ns"].to_numpy()[1:]).all()
    gpu = ev[ev["stream"] == 7].sort_values(["rank", "start_ns"])
    for _, rows in gpu.groupby("rank"):
        assert ((rows["start_ns"] + rows["dur_ns"]).to_numpy()[:-1] <= rows["start_ns"].to_numpy()[1:]).all()
    assert isinstance(ev, pd.DataFrame)
