"""The real-job accuracy corpus (``tests/fixtures/accuracy``) is what ``runs.json`` says it is.

Promise checked: every run listed in ``runs.json`` (recorded by ``scripts/record_accuracy_runs.py``)
is there, loads with ``load_path`` without an error note, and holds as many ranks, profiled steps
(traces) and steps (step files) as ``runs.json`` says, with a stack profile of every rank; the
truth it records is consistent (a clean run slows no rank; a slowed run names one rank and how, and
says whether that rank is expected to be named, with why not). The corpus has at least 20 clean runs
and, of each slowed scenario, 3 runs expected to be named, each showing its slowed rank as the slowest
forward in its step files. The 0.5-core quota runs are kept but not expected to be named (each rank
already gets about half a core here), and the tally keeps such runs out of the detection rate.

``accuracy_tally()`` returns the tally of ``scripts/measure_accuracy.py`` on the corpus (false
positives on clean runs, detections on slowed ones, from traces alone and from everything), for
the accuracy assertions that come with the reworked straggler statistics.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from perftracker.collectors.loading import LoadOptions, load_path

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "fixtures" / "accuracy"
sys.path.insert(0, str(REPO / "scripts"))

import measure_accuracy  # noqa: E402 - needs scripts/ on sys.path

SLOWED_SCENARIOS = ("hog", "inproc", "quota", "stop")
# runs per (scenario, expect_named) as recorded: clean runs have no slowed rank to name (None)
CORPUS_COUNTS = {("clean", None): 21, ("hog", True): 6, ("inproc", True): 4, ("quota", True): 3,
                 ("quota", False): 3, ("stop", True): 3}


def _index() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / "runs.json").read_text(encoding="utf-8"))
    return data


RUNS = _index()["runs"]


def accuracy_tally() -> dict[str, Any]:
    """The measurement script's tally of the whole corpus (see ``measure_accuracy.Tally.as_dict``):
    ``["modes"]["traces" | "all"]["clean_runs_with_loud_finding"]["hits"]``, ``[...]["slowed_rank_named"]
    [scenario]``, ... Analyzes every run twice: minutes, not seconds."""
    return measure_accuracy.measure(CORPUS).as_dict()


def test_corpus_has_the_runs_the_measurement_needs() -> None:
    # GIVEN the corpus index
    counts = Counter((run["scenario"], run["expect_named"]) for run in RUNS)
    # THEN it holds the recorded runs per scenario: at least 20 clean runs and, of each slowed
    # scenario, at least 3 runs whose slowed rank is expected to be named, under unique names
    assert dict(counts) == CORPUS_COUNTS
    assert counts[("clean", None)] >= 20
    for scenario in SLOWED_SCENARIOS:
        assert counts[(scenario, True)] >= 3, counts
    assert len({run["name"] for run in RUNS}) == len(RUNS)
    # AND the runs not expected to be named are the 0.5-core quota runs, which say why
    assert {(run["slowed_how"]["share"], run["expect_named_why"]) for run in RUNS if run["expect_named"] is False} \
        == {(0.5, "not expected to be named: 0.5 of a core does not bind when each rank already gets about half a "
                  "core (4 ranks on 2 shared cores)")}
    # AND the clean runs include short windows (the 6 profiled steps) and longer ones
    profiled = Counter(run["profiled_steps"] for run in RUNS if run["scenario"] == "clean")
    assert profiled[6] >= 3 and sum(n for steps, n in profiled.items() if steps >= 16) >= 12, profiled


@pytest.mark.parametrize("run", RUNS, ids=[run["name"] for run in RUNS])
def test_truth_of_each_run_is_consistent(run: dict[str, Any]) -> None:
    # GIVEN a run's entry in runs.json and its manifest
    manifest = json.loads((CORPUS / run["name"] / "manifest.json").read_text(encoding="utf-8"))
    # THEN a clean run slows no rank, a slowed run names one rank of the job and how it was slowed
    if run["scenario"] == "clean":
        assert run["slowed_rank"] is None and run["slowed_how"] is None
        assert run["expect_named"] is None and run["expect_named_why"] is None
        assert manifest["slowdown"] is None
    else:
        assert run["scenario"] in SLOWED_SCENARIOS
        assert run["slowed_rank"] in range(run["ranks"]) and run["slowed_how"]["kind"]
        # AND it says whether its slowed rank is expected to be named, and if not, why
        assert run["expect_named"] in (True, False)
        assert (run["expect_named_why"] is None) == run["expect_named"]
    if run["scenario"] == "stop":
        # AND a stopped rank was stopped for the share asked for, however loaded the machine was
        cycle = next(d for d in run["disturbance"] if d["how"] == "sigstop-duty-cycle")
        assert cycle["rank"] == run["slowed_rank"] and cycle["achieved_stopped"] >= cycle["stopped"] - 0.05, cycle
    # AND the manifest records the same truth and the command that ran the job
    assert manifest["accuracy"] == {"scenario": run["scenario"], "layout": run["layout"],
                                    "slowed_rank": run["slowed_rank"]}
    assert run["command"] == manifest["command"] and "--profile-steps" in run["command"]
    assert run["regenerate"].endswith(f"--only {run['name']} --replace")


EXPECTED = [run for run in RUNS if run["expect_named"]]


@pytest.mark.parametrize("run", EXPECTED, ids=[run["name"] for run in EXPECTED])
def test_a_run_expected_to_be_named_shows_its_slowed_rank_slowest(run: dict[str, Any]) -> None:
    # GIVEN a slowed run whose slowed rank is expected to be named
    # WHEN its step files are read (runs.json's `observed`: each rank's median forward over the
    # median of the others', over the profiled steps)
    ratio = {int(r): v for r, v in run["observed"]["forward_vs_others"].items()}
    # THEN the slowed rank is the slowest, clearly (1.4x the others at least), so the slowdown is real
    assert max(ratio, key=lambda r: ratio[r]) == run["slowed_rank"], ratio
    assert ratio[run["slowed_rank"]] >= 1.4, ratio


@pytest.mark.parametrize("run", RUNS, ids=[run["name"] for run in RUNS])
def test_each_run_loads_with_its_ranks_and_steps(run: dict[str, Any]) -> None:
    # GIVEN a run of the corpus
    run_dir = CORPUS / run["name"]
    # WHEN it is loaded as `perftracker analyze` loads it
    store = load_path(run_dir, LoadOptions(workers=1))
    # THEN nothing in it is unreadable
    errors = [f"{n.source}: {n.message}" for n in store.notes if n.level == "error"]
    assert errors == []
    # AND it holds every rank, with the profiled steps (traces) and steps (step files) runs.json says
    ranks = set(range(run["ranks"]))
    assert set(store.events["rank"].unique()) == ranks
    steps = store.steps.groupby(["source", "rank"]).size().to_dict()
    assert {r: steps.get(("profiler", r)) for r in ranks} == dict.fromkeys(ranks, run["profiled_steps"])
    assert {r: steps.get(("stepfile", r)) for r in ranks} == dict.fromkeys(ranks, run["steps"])
    # AND every rank's matched gradient all-reduces are in the traces, one or more per profiled step
    coll = store.events[store.events["kind"] == "collective_cpu"]
    assert set(coll["rank"].unique()) == ranks
    assert coll.groupby("rank")["step"].nunique().min() == run["profiled_steps"]
    # AND every rank has a stack profile for the stack_profile analyzer
    assert set(store["profile_samples"]["rank"].unique()) == ranks


def test_traces_only_copy_leaves_out_step_files_and_profiles(tmp_path: Path) -> None:
    # GIVEN a run of the corpus
    run_dir = CORPUS / RUNS[0]["name"]
    # WHEN the measurement makes its traces-only copy
    copy = measure_accuracy.traces_only_copy(run_dir, tmp_path / "copy")
    # THEN the copy has the manifest, traces and env files, and no step files or stack profiles
    assert sorted(p.name for p in copy.iterdir()) == ["env", "manifest.json", "traces"]
    assert sorted(p.name for p in (copy / "traces").iterdir()) == sorted(
        p.name for p in (run_dir / "traces").iterdir())


def _outcome(name: str, slowed: int | None, *findings: tuple[str, str, list[int]],
             error: str = "", expect_named: bool = True) -> measure_accuracy.Outcome:
    truth = measure_accuracy.RunTruth(name, "clean" if slowed is None else "hog", "unpinned", slowed, Path(name),
                                      expect_named=expect_named,
                                      expect_named_why="" if expect_named else "does not bind here")
    return measure_accuracy.Outcome(truth, "traces", tuple(
        {"analyzer": a, "severity": s, "title": f"{a} {s}", "ranks": r} for a, s, r in findings), error=error)


def test_tally_counts_loud_findings_on_clean_runs_and_the_slowed_rank_on_slowed_ones() -> None:
    # GIVEN outcomes: a clean run with an info straggler only, a clean run with a warning of the steps
    # analyzer, a hog run naming its slowed rank 1 (and rank 2 too), a hog run naming only rank 3,
    # a run whose analysis failed, and a loud finding of an analyzer that is not straggler-type
    tally = measure_accuracy.ModeTally()
    for outcome in (
        _outcome("quiet", None, ("straggler", "info", [1]), ("inputs", "warning", [0])),
        _outcome("noisy", None, ("steps", "warning", [2])),
        _outcome("found", 1, ("straggler", "warning", [1]), ("degradation", "critical", [2])),
        _outcome("missed", 1, ("straggler", "critical", [3])),
        _outcome("broken", None, error="InputError: bad trace"),
    ):
        tally.add(outcome)
    # WHEN it is summed up
    result = tally.as_dict()
    # THEN one of two analyzed clean runs is a false positive, from the steps analyzer, with its title
    assert result["clean_runs_with_loud_finding"] == {"hits": 1, "runs": 2, "rate": 0.5}
    assert result["clean_runs_with_loud_finding_by_analyzer"]["steps"]["hits"] == 1
    assert result["clean_runs_with_loud_finding_by_analyzer"]["straggler"]["hits"] == 0
    assert [f["title"] for f in result["false_positives"]] == ["steps warning"]
    # AND the slowed rank was named in one of two hog runs (by the straggler analyzer), and both named
    # another rank as well
    assert result["slowed_rank_named"]["hog"] == {"hits": 1, "runs": 2, "rate": 0.5}
    assert result["slowed_rank_named_by_analyzer"]["hog"]["straggler"]["hits"] == 1
    assert result["slowed_runs_naming_another_rank"]["hog"]["hits"] == 2
    # AND the failed analysis is an error, not a pass
    assert result["errors"] == ["broken: InputError: bad trace"]


def test_tally_shows_runs_not_expected_to_be_named_apart_from_the_detection_rate() -> None:
    # GIVEN a hog run that names its slowed rank, and two hog runs not expected to be named: one
    # names its slowed rank anyway, one names nothing
    tally = measure_accuracy.ModeTally()
    for outcome in (
        _outcome("found", 1, ("straggler", "warning", [1])),
        _outcome("weak-named", 2, ("steps", "warning", [2]), expect_named=False),
        _outcome("weak-missed", 3, ("straggler", "info", [3]), expect_named=False),
    ):
        tally.add(outcome)
    # WHEN it is summed up
    result = tally.as_dict()
    # THEN the detection rate counts only the run expected to be named
    assert result["slowed_rank_named"]["hog"] == {"hits": 1, "runs": 1, "rate": 1.0}
    # AND the other two are counted apart, each with its outcome and why it is not expected
    assert result["not_expected_slowed_rank_named"]["hog"] == {"hits": 1, "runs": 2, "rate": 0.5}
    assert result["not_expected_slowed_rank_named_by_analyzer"]["hog"]["steps"]["hits"] == 1
    assert [(r["run"], r["named"], r["why"]) for r in result["not_expected_runs"]] == [
        ("weak-named", True, "does not bind here"), ("weak-missed", False, "does not bind here")]
    # AND the table shows them under their own heading, naming the runs
    table = measure_accuracy.render(measure_accuracy.Tally({"traces": tally}))
    assert "not expected to be named" in table and "weak-named (named), weak-missed: does not bind here" in table


def test_stragglers_from_traces_alone_beat_the_noise_of_real_clean_runs() -> None:
    # GIVEN the 21 clean and the slowed real runs of the corpus, from their traces alone (no step files)
    tally = measure_accuracy.measure(CORPUS, modes=("traces",)).as_dict()["modes"]["traces"]
    clean = tally["clean_runs_with_loud_finding_by_analyzer"]["straggler"]
    named = tally["slowed_rank_named_by_analyzer"]
    # THEN at most one clean run gets a straggler warning (measured before the significance test: 7 of 21;
    # the one left is clean-3+1-16, three ranks sharing a core and rank 3 alone, see README "Accuracy")
    assert clean["runs"] >= 20 and clean["hits"] <= 1, tally["false_positives"]
    # AND every slowed rank that really is slower is named from its traces (the 4-loop hog on rank 0,
    # 1.41x, within clean noise, may be missed)
    assert named["inproc"]["straggler"]["hits"] == named["inproc"]["straggler"]["runs"] >= 4
    assert named["quota"]["straggler"]["hits"] == named["quota"]["straggler"]["runs"] >= 3
    # AND so is every rank stopped (SIGSTOP) 90% of every 20 ms from outside
    assert named["stop"]["straggler"]["hits"] == named["stop"]["straggler"]["runs"] >= 3
    assert named["hog"]["straggler"]["hits"] >= named["hog"]["straggler"]["runs"] - 1


def _step_files_only(run_dir: Path, dest: Path) -> Path:
    """A copy of the run with only its step files and sampled stacks (what the step-time and stack-profile
    rules read), fast to analyze."""
    import shutil

    shutil.copytree(run_dir / "steps", dest / "steps")
    shutil.copytree(run_dir / "profiles", dest / "profiles")
    return dest


def test_step_time_and_stack_rules_stay_quiet_on_real_clean_runs(tmp_path: Path) -> None:
    # GIVEN the step files and py-spy recordings of the 21 clean real runs (4 ranks sharing 2 cores with
    # whatever else runs here: step times wander by tens of percent within a run)
    from perftracker.analyzers.analysis import Analysis
    from perftracker.analyzers.findings import Severity
    from perftracker.analyzers.passes import costed_findings

    loud: dict[str, list[str]] = {}
    clean = [run for run in RUNS if run["scenario"] == "clean"]
    for run in clean:
        store = load_path(_step_files_only(CORPUS / run["name"], tmp_path / run["name"]), LoadOptions(workers=1))
        # WHEN the step-time rules (unstable steps, step imbalance, phase stragglers, slowdowns) and the
        # stack-profile rule judge them
        found = [f for f in costed_findings(Analysis(store)) if f.analyzer in ("steps", "degradation", "stack_profile")]
        titles = [f.title for f in found if f.severity >= Severity.WARNING]
        if titles:
            loud[run["name"]] = titles
    # THEN at most one run gets a warning (before the significance tests: 12 of 21; the one left is
    # clean-unpinned-32, whose whole machine got 80% slower for its last 16 steps, named as all ranks
    # at once on that host; the stack-profile rule named no clean run before or after)
    assert len(clean) >= 20 and len(loud) <= 1, loud
