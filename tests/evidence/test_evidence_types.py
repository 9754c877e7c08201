"""The evidence contract: every finding kind has a type, every number in it a declared unit, and what a finding
holds off its type is named (the suite's conftest runs that check on every finding a test makes)."""

from __future__ import annotations

import ast
from pathlib import Path

from perftracker.analyzers.findings import Kind
from perftracker.analyzers.registry import BUILTIN
from perftracker.evidence import EVIDENCE_OF, breaches, declared, field_of, units_of
from perftracker.evidence.units import by_name

PACKAGE = Path(__file__).resolve().parents[2] / "perftracker"


def test_every_built_in_kind_has_an_evidence_type() -> None:
    # GIVEN the analyzers' names and the finding kinds the passes know
    kinds = {a.name for a in BUILTIN} | {str(k) for k in Kind}
    # THEN each has its evidence type, and no type is declared for a kind nothing makes
    assert sorted(kinds - set(EVIDENCE_OF)) == []
    assert sorted(set(EVIDENCE_OF) - kinds - {"sanity", "diff"}) == []


def test_a_number_whose_name_says_a_unit_declares_one() -> None:
    # GIVEN every key of every kind's evidence (and of the records in it)
    # THEN a key whose name says a unit (`_ms`, `_gbps`, `share`...) has a unit in its type, so the report never
    # shows a bare number for it because a type said `float` where it meant `Ms`
    bare = [f"{kind}.{key}" for kind in EVIDENCE_OF for key in units_of(kind)
            if by_name(key).unit and not field_of(key, kind).unit]
    assert bare == []


def test_what_a_finding_holds_off_its_type_is_named() -> None:
    # GIVEN straggler evidence with a key its type lacks, a wrong value type, a wrong record column and a pass's key
    evidence = {"median_lateness_ms": 3, "bogus": 1, "significance": {"confidence": "high"}, "cost_source": "replay"}
    # THEN the unknown key and the mistyped values are named, a pass's key and an int for a float are not
    assert breaches("straggler", evidence) == ["bogus: not declared", "significance.confidence: str, declared float"]
    # AND a kind with no declared type (a plugin's) conforms whatever it holds
    assert breaches("my_plugin", {"anything": object()}) == []
    assert "cost_source" in declared("my_plugin") and "median_lateness_ms" not in declared("my_plugin")


def test_the_evidence_room_imports_nothing_of_the_package_but_itself() -> None:
    # GIVEN the modules of perftracker/evidence/
    for path in (PACKAGE / "evidence").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        # THEN every room may import it: it stands on nothing above it
        assert [m for m in imported if m.startswith("perftracker") and not m.startswith("perftracker.evidence")] == []
