"""The wait-for graph across process groups: one root finding per fault, consequences as its evidence.

Real inputs: the public NVRx dumps of a 16-rank Megatron MoE job with faults injected on two known ranks
(tests/fixtures/nvrx_fr/SOURCES.md) and real 8-rank gloo jobs recorded here (tests/fixtures/fr_gloo). Synthetic dumps (frgen) only for exact ground truth: a cycle."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.crash import analyze_crash, world_size
from perftracker.analyzers.failures.fold import fold_failures
from perftracker.analyzers.failures.hang import analyze_hang
from perftracker.analyzers.failures.waitfor import wait_graph
from perftracker.analyzers.failures.waitview import wait_graph_view
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.passes import costed_findings
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.postmortem.flight_recorder import load_fr_dumps
from perftracker.reports.waits_section import wait_graph_section
from perftracker.store import Store

from .frgen import entry

NVRX = Path(__file__).resolve().parents[1] / "fixtures" / "nvrx_fr"
CASES = ("gpu_error_1st", "gpu_error_2nd", "lock_gil_1st", "lock_gil_2nd")


def injected(case: str) -> tuple[int, ...]:
    text = (NVRX / case / "fault_injection.log").read_text()
    match = re.search(r"Fault ranks: \[([\d, ]+)\]", text)
    assert match
    return tuple(sorted(int(r) for r in match.group(1).split(",")))


def load(path: Path) -> Store:
    return load_path(path, LoadOptions(cache_dir=None, workers=1))


@pytest.mark.parametrize("case", CASES)
def test_the_first_finding_names_the_injected_ranks_and_no_others(case: str) -> None:
    # GIVEN the flight-recorder dumps of a 16-rank job where a GPU error or a held GIL hit two known ranks
    store = load(NVRX / case)
    # WHEN the crash analyzer builds the wait-for graph
    found = analyze_crash(Analysis(store))
    critical = [f for f in found if f.severity == Severity.CRITICAL]
    # THEN one critical finding: the injected ranks, with every other rank waiting behind them
    assert len(critical) == 1, [f.title for f in critical]
    root = critical[0]
    assert root.ranks == injected(case)
    assert sorted(root.evidence["waiting_behind"]) == sorted(set(range(16)) - set(injected(case)))
    assert re.search(r"; 14 ranks in \d+ process groups wait behind them$", root.title)
    # AND the stuck collectives are its evidence: group, collective, waiting ranks, since when
    rows = root.evidence["consequences"]
    assert len(rows) >= 4 and all(r["waiting_ranks"] and r["since"] for r in rows)
    assert any(r["pg_desc"] == "EXPERT_MODEL_PARALLEL_GROUP" and set(r["missing_ranks"]) & set(root.ranks)
               for r in rows)


def test_gpu_errors_read_as_stalled_completions_and_gil_holders_as_missing_ranks() -> None:
    # GIVEN a GPU error case and a held-GIL case
    gpu = wait_graph(s := load(NVRX / "gpu_error_2nd"), world_size(s))
    gil = wait_graph(s := load(NVRX / "lock_gil_1st"), world_size(s))
    # THEN the GPU-error ranks stopped seeing completions their TP peers saw; the GIL holders never entered
    assert [(r.kind, r.ranks) for r in gpu.roots] == [("stalled", (9, 14))]
    assert {(s.rank, s.completed, s.peer_completed) for s in gpu.stalls if s.desc == "TENSOR_MODEL_PARALLEL_GROUP"} \
        == {(9, 87748, 87760), (14, 87748, 87760)}
    assert [(r.kind, r.ranks) for r in gil.roots] == [("missing", (9, 14))]


def test_pg_status_is_keyed_by_group_name_even_for_a_rank_whose_dump_has_no_entries() -> None:
    # GIVEN rank 9 of lock_gil_1st: an empty entry list, pg_status keyed by local pg ids 0..16
    _, info, notes = load_fr_dumps([NVRX / "lock_gil_1st" / "_dump_9"])
    # THEN its status is keyed by the pg_config names (paired by creation order)
    assert not notes
    assert set(info.fr_pg_status["9"]) == set(info.fr_pg_config)
    assert info.fr_pg_status["9"]["72"]["last_enqueued_collective"] == 45264  # its EXPERT_MODEL_PARALLEL_GROUP


def synthetic(tmp_path: Path, config: dict[str, list[int]], plan: dict[int, dict[str, tuple[int, int]]]) -> Store:
    """Pickled dumps where rank r's group g enqueued up to plan[r][g][0] and completed up to plan[r][g][1]."""
    for rank, groups in plan.items():
        entries = [entry(seq, pg=pg, desc=f"GROUP_{pg}", state="scheduled")
                   for pg, (enq, done) in groups.items() for seq in range(done + 1, enq + 1)]
        body = {"version": "2.10", "pg_config": {pg: {"name": pg, "desc": f"GROUP_{pg}", "ranks": str(ranks)}
                                                 for pg, ranks in config.items()},
                "pg_status": {pg: {"last_enqueued_collective": e, "last_started_collective": -1,
                                   "last_completed_collective": d} for pg, (e, d) in groups.items()},
                "entries": entries}
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(body))
    return load(tmp_path)


def test_waiting_is_followed_across_groups_to_the_one_rank_at_its_end(tmp_path: Path) -> None:
    # GIVEN groups 10 = [0, 1], 11 = [1, 2], 12 = [2, 3]: rank 0 waits in 10 #7 for rank 1, which waits in
    # 11 #5 for rank 2, which waits in 12 #3 for rank 3, which never entered it (synthetic: exact truth)
    store = synthetic(tmp_path, {"10": [0, 1], "11": [1, 2], "12": [2, 3]},
                      {0: {"10": (7, 6)}, 1: {"10": (6, 6), "11": (5, 4)}, 2: {"11": (4, 4), "12": (3, 2)},
                       3: {"12": (2, 2)}})
    # WHEN the crash analyzer runs
    found = analyze_crash(Analysis(store))
    # THEN one finding: rank 3, with ranks 0, 1, 2 behind it in three groups
    assert [(f.ranks, f.evidence["waiting_behind"]) for f in found] == [((3,), [0, 1, 2])]
    assert "3 ranks in 3 process groups wait behind it" in found[0].title
    assert [r["pg"] for r in found[0].evidence["consequences"]] == ["10", "11", "12"]


def test_ranks_waiting_for_each_other_in_different_groups_are_a_cycle_root(tmp_path: Path) -> None:
    # GIVEN groups 10 and 11, both [0, 1]: rank 0 entered 10 #1 and not 11 #1, rank 1 the other way round
    store = synthetic(tmp_path, {"10": [0, 1], "11": [0, 1]},
                      {0: {"10": (1, 0), "11": (0, 0)}, 1: {"10": (0, 0), "11": (1, 0)}})
    graph = wait_graph(store, world_size(store))
    # THEN the two ranks are one root of kind "cycle", named in one finding
    assert [(r.kind, r.ranks) for r in graph.roots] == [("cycle", (0, 1))]
    found = analyze_crash(Analysis(store))
    assert len(found) == 1 and "disagree on the order of collectives" in found[0].title


def test_a_member_without_a_dump_is_named_as_such(tmp_path: Path) -> None:
    # GIVEN group 10 = [0, 1, 2]: ranks 0 and 1 wait in #4; rank 2 left no dump
    store = synthetic(tmp_path, {"10": [0, 1, 2]}, {0: {"10": (4, 3)}, 1: {"10": (4, 3)}})
    found = analyze_crash(Analysis(store))
    # THEN rank 2 is the root and the title says it left no dump
    assert [f.ranks for f in found] == [(2,)]
    assert found[0].title.startswith("Rank 2 left no dump, no stack and no error of its own and never entered pg 10 "
                                     "GROUP_10 #4")


GLOO = Path(__file__).resolve().parents[1] / "fixtures" / "fr_gloo"


@pytest.mark.parametrize("case", ["gil", "raise", "kill"])
def test_real_gloo_jobs_name_the_faulted_rank_once_across_every_failure_rule(case: str) -> None:
    # GIVEN a real 8-rank gloo job (tensor, data, pipeline groups) where rank 5 held the GIL, raised, or was
    # killed, with its flight-recorder dumps, py-spy stacks and torchrun output (tests/fixtures/fr_gloo)
    store = load(GLOO / case)
    analysis = Analysis(store)
    # WHEN every failure rule runs and what the wait-for graph explains is folded into its root
    found = fold_failures([*analyze_crash(analysis), *analyze_hang(analysis)])
    critical = [f for f in found if f.severity == Severity.CRITICAL]
    # THEN one critical finding, rank 5, with the 7 others behind it
    assert [f.ranks for f in critical] == [(5,)], [f.title for f in critical]
    root = critical[0]
    assert root.evidence["waiting_behind"] == [0, 1, 2, 3, 4, 6, 7]
    expect = {"gil": "rank 5 stack at fault (fr_fault_job.py:", "raise": "RuntimeError: fr_fault_job: injected failure",
              "kill": "Rank 5 left no dump, no stack and no error of its own"}[case]
    assert expect in root.title
    # AND the stack rule's finding (which, in the kill case, blames the ranks that lost their peer) is folded in
    assert any(f["analyzer"] == "hang" for f in root.evidence.get("folded", []))


def test_the_report_shows_who_waits_for_whom_grouped_by_process_group() -> None:
    # GIVEN the held-GIL case of the public dumps
    analysis = Analysis(load(NVRX / "lock_gil_1st"))
    # WHEN the wait-for view and its report section are built
    view = wait_graph_view(analysis)
    section = wait_graph_section({"wait_graph": view}, analyze_crash(analysis))
    # THEN one row per stuck collective, grouped by process-group kind, each leading to the root 9, 14
    ep = view[view["group"] == "EXPERT_MODEL_PARALLEL_GROUP"].iloc[0]
    assert (ep["pg"], ep["collective"], ep["waiting"], ep["waits_for"]) == \
        ("72", "nccl:all_to_all #45265", "8, 10, 11, 12, 13, 15", "9, 14")
    assert set(view["root"]) == {"9, 14"}
    assert section is not None and section.key == "waitfor" and "Root: Ranks 9, 14" in section.data["note"]
    assert section.data["table"]["head"][:4] == ["process group", "pg", "collective (#seq)", "waiting ranks"]


@pytest.mark.parametrize(("fixture", "culprit"), [("postmortem/gloo-timeout-lost-peer", (2,)), ("lab/kill-3", (2, 3))])
def test_a_lost_peer_error_folds_into_the_cause_in_logs_without_dumps(fixture: str, culprit: tuple[int, ...]) -> None:
    # GIVEN real runs without flight-recorder dumps: a rank that never joined a gloo all_reduce (the first error
    # logged is another rank's "Connection closed by peer"), and a node killed mid-run (lab kill-3)
    analysis = Analysis(load(Path(__file__).resolve().parents[1] / "fixtures" / fixture))
    # WHEN every analyzer runs and the failure findings are folded
    found = fold_failures(costed_findings(analysis))
    critical = [f for f in found if f.severity == Severity.CRITICAL]
    # THEN one critical finding names the culprit, and the lost-peer "first failure" is its evidence
    assert [f.ranks for f in critical] == [culprit], [f.title for f in critical]
    assert [f["analyzer"] for f in critical[0].evidence["folded"]] == ["crash"]
    assert "lost peer" in critical[0].evidence["folded"][0]["title"]


def test_a_dump_that_cannot_be_read_is_a_note_and_its_rank_is_named_without_a_dump(tmp_path: Path) -> None:
    # GIVEN the held-GIL case with rank 9's dump cut in half (a copy truncated as a full disk leaves it)
    case = tmp_path / "case"
    case.mkdir()
    for dump_file in (NVRX / "lock_gil_1st").glob("_dump_*"):
        data = dump_file.read_bytes()
        (case / dump_file.name).write_bytes(data[: len(data) // 2] if dump_file.name == "_dump_9" else data)
    # WHEN it is loaded and judged
    store = load(case)
    found = [f for f in analyze_crash(Analysis(store)) if f.severity == Severity.CRITICAL]
    # THEN the load notes name the file and why; rank 9 is named as leaving no readable dump, rank 14 as missing
    assert any(n.source.endswith("_dump_9") and "not a readable flight-recorder dump" in n.message for n in store.notes)
    assert sorted(r for f in found for r in f.ranks) == [9, 14]
    assert any(f.ranks == (9,) and f.title.startswith("Rank 9 left no dump") for f in found)


def test_collectives_every_member_entered_are_one_stuck_collective_finding_only_when_nothing_else_explains(
        tmp_path: Path) -> None:
    # GIVEN groups 10 = [0, 1] and 11 = [2, 3]: every member entered #5 and none completed it, nobody missing
    store = synthetic(tmp_path, {"10": [0, 1], "11": [2, 3]},
                      {0: {"10": (5, 4)}, 1: {"10": (5, 4)}, 2: {"11": (5, 4)}, 3: {"11": (5, 4)}})
    found = analyze_crash(Analysis(store))
    # THEN one finding (was one per group): the communication itself is stuck, both groups in its evidence
    assert len(found) == 1 and found[0].ranks == (0, 1, 2, 3)
    assert "the communication itself is stuck" in found[0].title
    assert sorted(r["pg"] for r in found[0].evidence["consequences"]) == ["10", "11"]
