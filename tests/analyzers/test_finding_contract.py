"""The typed finding contract: a finding's role, the one ordered list of finding passes, the typed summary.

Plain data in, plain data out: no run is loaded (the passes that need a run's tables are given an empty Store).
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

from perftracker.analyzers import passes
from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Kind, Mark, Role, Severity, failure_finding
from perftracker.analyzers.passes import FINDING_PASSES, apply_passes
from perftracker.evidence import breaches
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


def _pass_modules() -> list[Path]:
    """The modules of the finding passes: what passes.py imports from analyzers/ (a package: all its modules), but
    the modules that name the analyzers (findings.py's Kind, registry.py's list)."""
    root = Path(passes.__file__).parent
    out = [Path(passes.__file__)]
    for node in ast.walk(ast.parse(Path(passes.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perftracker.analyzers."):
            rel = root.joinpath(*node.module.split(".")[2:])  # type: ignore[union-attr]
            if rel.name in ("findings", "registry"):
                continue
            out += sorted(rel.glob("*.py")) if rel.is_dir() else [rel.with_suffix(".py")]
    return out


def _texts_naming_analyzers(tree: ast.AST) -> list[ast.Constant]:
    """The texts of a module that say which analyzer's findings it means: a finding key's start ("crash:root:")
    but in a key it makes (`key=`), or an analyzer's name listed (a tuple, list, set or dict key) or compared
    with a finding's `analyzer`."""
    def text(n: ast.AST) -> bool:
        return isinstance(n, ast.Constant) and isinstance(n.value, str)
    docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(
        n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body and isinstance(n.body[0], ast.Expr)}
    made = {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "key"}
    listed = [c for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.List, ast.Set)) for c in n.elts]
    listed += [k for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None]
    listed += [c for n in ast.walk(tree) if isinstance(n, ast.Compare) and any(isinstance(
        s, ast.Attribute) and s.attr == "analyzer" for s in [n.left, *n.comparators]) for c in [n.left, *n.comparators]]
    kinds = {k.value for k in Kind}
    prefixed = [n for n in ast.walk(tree) if text(n) and id(n) not in docs | made
                and any(str(n.value).startswith(f"{k}:") for k in kinds)]  # type: ignore[attr-defined]
    return [*prefixed, *(c for c in listed if text(c) and c.value in kinds)]  # type: ignore[attr-defined]


def test_no_pass_matches_an_analyzer_or_a_key_by_text() -> None:
    # GIVEN the modules of the finding passes (those that relate one analyzer's findings to another's)
    modules = _pass_modules()
    assert {"fold.py", "waited_fold.py", "chains.py", "causality.py"} <= {p.name for p in modules}
    bad = [f"{path.name}:{n.lineno}: {n.value!r}" for path in modules
           for n in _texts_naming_analyzers(ast.parse(path.read_text(encoding="utf-8")))]
    # THEN none names an analyzer or a finding key's start as text: they say `Kind` and `Mark` members
    assert not bad, bad


def test_no_analyzer_compares_an_analyzer_name_or_a_key_with_text() -> None:
    # GIVEN every analyzer module but findings.py (where `Mark.on` is the one test of a key's start)
    bad = []
    for path in sorted(p for p in Path(passes.__file__).parent.rglob("*.py") if p.name != "findings.py"):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # WHEN `<finding>.analyzer` or `.key` is compared with text, or a key's start is tested against text
            sides = [n.left, *n.comparators] if isinstance(n, ast.Compare) else []
            named = any(isinstance(s, ast.Attribute) and s.attr in ("analyzer", "key") for s in sides)
            texts = [c for s in sides for c in ([s] if isinstance(s, ast.Constant) else getattr(s, "elts", []))
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            prefix = isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "startswith" \
                and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "key"
            if named and texts or prefix:
                bad.append(f"{path.relative_to(path.parents[2])}:{n.lineno}")
    # THEN there is none: `f.analyzer == Kind.CRASH`, `Mark.WAIT_ROOT.on(f)`
    assert not bad, bad


def test_a_mark_makes_the_key_it_matches() -> None:
    # GIVEN a key made by a Mark
    f = Finding(Kind.CRASH, Severity.CRITICAL, "Rank 3 died", "", key=Mark.WAIT_ROOT.key("missing", [3]))
    # THEN it is the text it always was, the mark finds it, and another analyzer's finding with that key is not it
    assert f.key == "crash:root:missing:[3]" and Mark.WAIT_ROOT.on(f) and not Mark.FIRST_FAILURE.on(f)
    assert not Mark.WAIT_ROOT.on(replace(f, analyzer=Kind.HANG))


def test_a_failed_analyzer_s_finding_holds_evidence_its_kind_declares() -> None:
    # GIVEN a built-in analyzer (idle) that raised WHEN its failure finding is made
    try:
        raise ValueError("a broken trace")
    except ValueError:
        failed = failure_finding(Kind.IDLE, "The idle analysis failed", "Report it.", "idle:failed")
    # THEN its traceback is evidence the kind's type declares (the suite's conftest checks it too)
    assert "a broken trace" in failed.evidence["traceback"] and breaches(Kind.IDLE, failed.evidence) == []
