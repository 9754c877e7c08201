"""The typed finding contract: a finding's role, the one ordered list of finding passes, the typed summary.

Plain data in, plain data out: no run is loaded (the passes that need a run's tables are given an empty Store).
"""

from __future__ import annotations

import json
from dataclasses import replace

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Kind, Role, Severity
from perftracker.analyzers.passes import FINDING_PASSES, apply_passes
from perftracker.reports import json_report
from perftracker.reports.json_report import RunFacts, Summary
from perftracker.store import Store


def test_a_role_is_inferred_when_left_out_and_kept_in_findings_json() -> None:
    # GIVEN findings made the way every analyzer makes them (no role given), and one that says its role
    fact = Finding("inputs", Severity.INFO, "4 traces loaded", "")
    cause = Finding("straggler", Severity.WARNING, "Rank 2 is late", "")
    effect = Finding("steps", Severity.WARNING, "Slow steps", "", role=Role.CONSEQUENCE)
    # THEN an info finding is context, any other a root, and a role given stays
    assert (fact.role, cause.role, effect.role) == (Role.CONTEXT, Role.ROOT, Role.CONSEQUENCE)
    # AND findings.json says it, and reads it back; a file written before roles reads with the role inferred
    assert effect.to_dict()["role"] == "consequence"
    assert Finding.from_dict(effect.to_dict()).role == Role.CONSEQUENCE
    old = {k: v for k, v in cause.to_dict().items() if k != "role"}
    assert Finding.from_dict(old).role == Role.ROOT
    # AND an inferred role follows the severity a pass gives (a fold that raises an info finding), a stated one stays
    assert replace(fact, severity=Severity.WARNING).role == Role.ROOT
    assert replace(effect, severity=Severity.CRITICAL).role == Role.CONSEQUENCE
    assert replace(fact.with_role(Role.CONSEQUENCE), severity=Severity.INFO).role == Role.CONSEQUENCE


def test_an_analyzer_kind_is_its_name_as_text() -> None:
    # GIVEN a finding made with a Kind, and the text names the analyzers write
    made = Finding(Kind.CRASH, Severity.CRITICAL, "Rank 3 died", "")
    # THEN it is stored, hashed, compared and written as the plain name
    assert type(made.analyzer) is str and made.analyzer == "crash" and made.id.startswith("crash-")
    assert {Kind.CRASH: 1}.get("crash") == 1 and "hang" in {Kind.HANG} and f"{Kind.SILENT_HOST}" == "silent_host"
    assert json.loads(json.dumps(made.to_dict()))["analyzer"] == "crash"


def test_the_passes_run_once_in_their_order_and_mark_what_a_cause_explains() -> None:
    # GIVEN the one list of finding passes
    assert [p.name for p in FINDING_PASSES] == ["positions", "replay costs", "links", "failure folds", "waited-rank fold",
                                                "roles", "ranking"]
    # AND a straggler whose root-cause chain names a host finding that explains it (what `links` writes)
    gpu = Finding("gpu_health", Severity.WARNING, "GPU 2 throttles", "", ranks=(2,), key="gpu")
    straggler = Finding("straggler", Severity.WARNING, "Rank 2 is late", "", ranks=(2,), key="s", evidence={
        "root_cause": {"chain": [{"id": gpu.id, "explains": True}]}})
    info = Finding("inputs", Severity.INFO, "loaded", "")
    # WHEN the roles and ranking passes run
    out = apply_passes(Analysis(Store()), [info, straggler, gpu], only=("roles", "ranking"))
    # THEN the straggler is the consequence, the GPU finding its root, the fact context; ranked as ever
    assert [(f.analyzer, f.role) for f in out] == [("gpu_health", Role.ROOT), ("straggler", Role.CONSEQUENCE),
                                                   ("inputs", Role.CONTEXT)]


def test_the_summary_is_typed_and_writes_the_keys_it_always_wrote() -> None:
    # GIVEN the findings and facts of one analysis
    findings = [Finding("steps", Severity.WARNING, "Slow steps", "", key="a"),
                Finding("inputs", Severity.INFO, "loaded", "", key="b")]
    facts = RunFacts(ranks=4, hosts=["node-1"], coverage={"judged": [{"area": "stragglers"}], "not_judged": []},
                     step_time_s=0.039, step_spread_across_ranks_s=None, hta_compat=False)
    # WHEN its summary is made and written
    summary = json_report.summary_of(findings, facts)
    document = json_report.build(findings, [], "run/", summary)
    # THEN findings.json's summary has the keys in the order it always had (a real run: no synthetic_inputs)
    assert list(document["summary"]) == ["verdict", "counts", "worst_cost_seconds_per_step", "biggest_cost", "ranks",
                                         "hosts", "coverage", "step_time_s", "step_spread_across_ranks_s",
                                         "hta_compat"]
    assert summary.verdict.startswith("1 warning") and summary.counts == {"info": 1, "warning": 1, "critical": 0}
    # AND a saved summary reads back as the same Summary, which writes the same keys again
    back = Summary.from_dict(json.loads(json.dumps(document["summary"])))
    assert back == summary and back.to_dict() == document["summary"]
    # AND a writer's own keys (sanity's) stay as they were given, after the core
    other = json_report.build(findings, [], "sanity", {"exclude": ["node-2"]})
    assert list(other["summary"])[-1] == "exclude" and Summary.from_dict(other["summary"]).extra == {
        "exclude": ["node-2"]}
