"""The JSON Schemas shipped in perftracker/schemas/ hold every findings.json and diff.json perftracker writes.

Each sample run's findings.json (analyzed by `perftracker demo`) and a diff.json are validated twice: against
the published schema (what a consumer uses; unknown keys allowed, the versioning rule being additive), and
against a strict copy in which every declared object refuses undeclared keys, so that a key perftracker
starts writing without declaring it fails here.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from perftracker.reports import json_report


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(resources.files("perftracker").joinpath("schemas", name).read_text())
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


def strict(node: Any) -> Any:
    """A copy in which every object schema with declared properties forbids other keys."""
    node = copy.deepcopy(node)
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "properties" in item and "additionalProperties" not in item:
                item["additionalProperties"] = False
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return node


def errors(document: Any, against: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(against)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_schema_version_of_the_files_is_the_one_the_code_writes() -> None:
    # GIVEN the shipped schemas WHEN read THEN they pin the version json_report writes
    for name in ("findings.schema.json", "diff.schema.json"):
        assert schema(name)["properties"]["schema_version"]["const"] == json_report.SCHEMA_VERSION


def test_every_sample_findings_json_is_valid(demo_outputs: Path) -> None:
    # GIVEN every sample run analyzed WHEN its findings.json is validated THEN no error, also strictly
    documents = sorted(demo_outputs.glob("*/findings.json"))
    assert len(documents) >= 5, documents
    published = schema("findings.schema.json")
    for path in documents:
        document = json.loads(path.read_text())
        assert errors(document, published) == [], path
        assert errors(document, strict(published)) == [], f"{path}: a key is written but not in the schema"


def test_diff_json_is_valid(diff_output: Path) -> None:
    document = json.loads(diff_output.read_text())
    published = schema("diff.schema.json")
    assert errors(document, published) == []
    assert errors(document, strict(published)) == [], "a key of diff.json is written but not in the schema"


def test_the_schema_catches_a_broken_document(demo_outputs: Path) -> None:
    # GIVEN a real findings.json WHEN a finding loses its severity or gets an unknown one THEN validation fails
    document = json.loads(next(demo_outputs.glob("*/findings.json")).read_text())
    broken = copy.deepcopy(document)
    broken["findings"][0]["severity"] = "fatal"
    assert errors(broken, schema("findings.schema.json"))
    del broken["findings"][0]["severity"]
    assert errors(broken, schema("findings.schema.json"))
    extra = copy.deepcopy(document)
    extra["findings"][0]["undeclared"] = 1
    assert errors(extra, schema("findings.schema.json")) == []  # additive: consumers accept it
    assert errors(extra, strict(schema("findings.schema.json")))  # but perftracker must declare it


@pytest.mark.parametrize("name", ["findings.schema.json", "diff.schema.json"])
def test_schemas_ship_as_package_data(name: str) -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["perftracker"]
    assert "schemas/*.json" in patterns
    assert resources.files("perftracker").joinpath("schemas", name).is_file()
