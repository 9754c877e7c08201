"""The what-if replay on the OSDI'25 artifact's three traces, side by side with the authors' expected results.

GIVEN the artifact's own per-operation records (tests/fixtures/osdi25, PROVENANCE.md) and its expected outputs
WHEN perftracker reads them as an input kind and replays them on the real pipeline and group dependencies
THEN S is within 5% of the published value (in fact within 0.01%), the verdict is the paper's (AR: one
worker, ST: the last stage, SE: random variation), and the top S_t, S_dp, S_stage, M_W, M_S agree.
"""

from __future__ import annotations

import gzip
import json
import shutil
from functools import cache
from pathlib import Path

import pytest

from perftracker import api
from perftracker.analyzers.whatif.analyzer import WhatIf, whatif
from perftracker.analyzers.whatif.ops_graph import build
from perftracker.collectors.whatif_ops.inputs import load_whatif_inputs

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "osdi25"
VERDICT = {"AR": "one_worker", "ST": "last_stage", "SE": "random_variation"}


@cache
def _replayed(trial: str) -> WhatIf:
    tables, notes, _ = load_whatif_inputs([DATA / f"trace-{trial}.parquet", DATA / f"meta-{trial}.yaml"])
    assert not [n for n in notes if n.level != "info"], notes
    ops = tables["pipeline_ops"]
    return whatif(build(ops), ops[["dp_rank", "stage", "rank"]])


def _expected(kind: str, trial: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((DATA / f"{kind}-{trial}.json").read_text())
    return loaded


@pytest.mark.parametrize("trial", ["AR", "ST", "SE"])
def test_slowdown_and_verdict_match_the_paper(trial: str) -> None:
    # GIVEN one of the artifact's traces; WHEN replayed
    r = _replayed(trial)
    result, mw, ms = _expected("result", trial), _expected("mw", trial), _expected("ms", trial)
    # THEN S within 5% of the published S (Eq. 1), and in fact the same to 4 digits
    published = float(result["blocking_slowdown"])  # type: ignore[arg-type]
    assert abs(r.slowdown - published) / published < 0.05
    assert r.slowdown == pytest.approx(published, rel=1e-4)
    assert r.ideal_s == pytest.approx(float(ms["tideal"]), rel=1e-4)  # type: ignore[arg-type]
    # THEN M_W (Eq. 5) and M_S as the artifact computes them
    assert r.m_w == pytest.approx(float(mw["Mw"]), abs=1e-3)  # type: ignore[arg-type]
    assert r.m_s == pytest.approx(float(ms["Ms"]), abs=1e-3)  # type: ignore[arg-type]
    # THEN the paper's verdict
    assert r.verdict == VERDICT[trial]


@pytest.mark.parametrize("trial", ["AR", "ST", "SE"])
def test_top_attributions_match(trial: str) -> None:
    # GIVEN the artifact's decomposition by op type (S_t, Eq. 2), replica and stage
    r = _replayed(trial)
    result = _expected("result", trial)
    for ours, theirs in ((r.by_optype, result["blocking_decompose_by_optype"]),
                         ({str(k): v for k, v in r.by_dp.items()}, result["blocking_decompose_by_dp_rank"]),
                         ({str(k): v for k, v in r.by_stage.items()}, result["blocking_decompose_by_stage"])):
        assert isinstance(theirs, dict)
        top_theirs = max(theirs, key=lambda k: theirs[k])
        # THEN the same top entry, with the same value
        assert max(ours, key=lambda k: ours[k]) == top_theirs
        assert ours[top_theirs] == pytest.approx(theirs[top_theirs], rel=1e-3)


def test_the_slowed_worker_is_named_with_its_stage() -> None:
    # GIVEN AR (one worker slowed on purpose); THEN the worker with the top S_w is DP 0, stage 0, rank 0
    workers = _replayed("AR").workers.sort_values("s_worker", ascending=False)
    top = workers.iloc[0]
    assert (int(top["dp_rank"]), int(top["stage"]), int(top["rank"])) == (0, 0, 0)
    assert _replayed("AR").m_w_workers == ((0, 0),)


def test_analyze_end_to_end_from_the_timeline_alone(tmp_path: Path) -> None:
    # GIVEN only the ST job's Chrome-trace timeline and its meta (no Parquet)
    shutil.copy(DATA / "timeline-ST.json.gz", tmp_path)
    shutil.copy(DATA / "meta-ST.yaml", tmp_path)
    # WHEN analyzed like any run
    run = api.analyze(tmp_path, cache=False)
    found = [f for f in run.findings if f.analyzer == "whatif"]
    # THEN one finding: the last stage, its ranks, S as published, its cost from the replay
    assert len(found) == 1 and found[0].evidence["verdict"] == "last_stage"
    assert found[0].evidence["slowdown_S"] == pytest.approx(1.1787, abs=2e-3)
    assert found[0].evidence["cost_source"] == "replay" and found[0].cost.seconds_per_step > 0.3
    assert "stage 3" in found[0].title
    assert {g.desc for g in run.store.run_info.process_groups.values()} == {"DP", "PP"}


def test_cut_parquet_and_bad_yaml_are_named(tmp_path: Path) -> None:
    # GIVEN a cut Parquet file and a meta file with a YAML tag (never evaluated), beside a good timeline
    raw = (DATA / "trace-ST.parquet").read_bytes()
    (tmp_path / "trace-ST.parquet").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "meta-ST.yaml").write_text("trial_name: ST\npp_size: !!python/object:os.system 4\n")
    with gzip.open(DATA / "timeline-ST.json.gz") as handle:
        (tmp_path / "timeline-ST.json").write_bytes(handle.read())
    # WHEN loaded
    tables, notes, _ = load_whatif_inputs(sorted(tmp_path.iterdir()))
    said = " | ".join(n.message for n in notes)
    # THEN each bad file is named with what is wrong, and the timeline still gives the records
    assert "trace-ST.parquet cannot be read as Parquet" in said
    assert "meta-ST.yaml line 2 is not a plain `key: value` line" in said
    assert len(tables["pipeline_ops"]) == 6784


def test_a_parquet_of_other_columns_is_not_read(tmp_path: Path) -> None:
    # GIVEN a Parquet file that is not per-operation records
    import pandas as pd

    pd.DataFrame({"a": [1, 2]}).to_parquet(tmp_path / "trace-X.parquet")
    tables, notes, _ = load_whatif_inputs([tmp_path / "trace-X.parquet"])
    # THEN nothing is loaded and the note names the file and the missing columns
    assert tables == {} and "trace-X.parquet is a Parquet file without the per-operation columns" in notes[0].message


def test_a_job_at_its_ideal_durations_does_not_straggle() -> None:
    # GIVEN the ST job with every op set to its type's ideal duration (no straggler left by construction)
    import dataclasses

    from perftracker.analyzers.whatif.analyzer import ideal

    tables, _, _ = load_whatif_inputs([DATA / "trace-ST.parquet"])
    graph = build(tables["pipeline_ops"])
    dur, transfer = ideal(graph)
    # WHEN replayed; THEN S is 1 and the verdict names nothing
    r = whatif(dataclasses.replace(graph, dur=dur, transfer=transfer))
    assert r.slowdown == pytest.approx(1.0) and r.verdict == "none"
