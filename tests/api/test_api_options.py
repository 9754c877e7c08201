"""Every option of the Python API typed and checked before anything is loaded, with the command line's messages.

A notebook passes anything: a string where a list is meant was split into characters (every kernel became
communication; "/etc/passwd" became eleven device files), "no" was taken as true, NaN, negative counts and
out-of-range ranks were accepted, and a wrong thresholds container failed only after the whole load.
Each case is given a path that does not exist: the option error must come first (nothing was loaded).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import perftracker
from perftracker.api import AnalysisOptions, load_options
from perftracker.cli import app
from perftracker.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
SLOW = REPO / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
NOWHERE = "/nonexistent/perftracker-run"  # loading it would be an InputError: a UsageError means nothing was loaded


def test_a_string_where_a_list_of_patterns_is_meant_is_refused_not_split_into_characters() -> None:
    # GIVEN comm_kernel_patterns="nccl" (one string, not a list)
    # WHEN analyze is called
    with pytest.raises(UsageError) as caught:
        perftracker.analyze(NOWHERE, comm_kernel_patterns="nccl")  # type: ignore[arg-type]
    # THEN it is refused before any loading, naming the option both ways and saying to give a list
    assert "comm_kernel_patterns / --comm-kernel" in caught.value.message
    assert "is not a list of strings" in caught.value.message


def test_device_files_given_as_one_string_is_refused_not_read_as_one_path_per_character() -> None:
    # GIVEN AnalysisOptions(device_files="/etc/passwd"); WHEN it is made; THEN it is refused at once
    with pytest.raises(UsageError, match="device_files / --devices"):
        AnalysisOptions(device_files="/etc/passwd")  # type: ignore[arg-type]
    # AND a list of paths is kept, as Paths
    assert AnalysisOptions(device_files=["a.toml"]).device_files == (Path("a.toml"),)  # type: ignore[arg-type]


@pytest.mark.parametrize(("keywords", "named"), [
    ({"ranks": [-1, 10**20]}, "ranks / --ranks"),
    ({"ranks": [10**20]}, "ranks / --ranks"),
    ({"max_events": -5}, "max_events / --max-events"),
    ({"steps": "abc"}, "steps / --steps"),
    ({"steps": [1.5]}, "steps / --steps"),
])
def test_timeline_selections_out_of_range_or_of_the_wrong_kind_are_refused(keywords: dict[str, object],
                                                                           named: str) -> None:
    # GIVEN a timeline selection that cannot select anything; WHEN timeline is called; THEN a UsageError first
    with pytest.raises(UsageError, match=named):
        perftracker.timeline(NOWHERE, **keywords)  # type: ignore[arg-type]


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -0.1, "5"])
def test_diff_tolerance_must_be_a_finite_number_at_least_zero(tolerance: object) -> None:
    # GIVEN diff(tolerance=nan) (or infinite, negative, a string); THEN refused before either side is read
    with pytest.raises(UsageError, match="tolerance / --tolerance"):
        perftracker.diff(NOWHERE, NOWHERE, tolerance=tolerance)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["no", 0, None, "False"])
def test_a_bool_option_given_anything_but_true_or_false_is_refused(value: object) -> None:
    # GIVEN hta_compat="no" (a truthy string), 0 or None; THEN refused, never taken as true or false
    with pytest.raises(UsageError, match="hta_compat / --hta-compat"):
        perftracker.analyze(NOWHERE, hta_compat=value)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="follow_links / --follow-links"):
        perftracker.analyze(NOWHERE, follow_links=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("thresholds", [[("straggler.alpha", 0.01)], "straggler.alpha=0.01", {1: 0.5}])
def test_a_thresholds_container_of_the_wrong_kind_is_refused_when_the_options_are_made(thresholds: object) -> None:
    # GIVEN thresholds as a list of pairs, a string, or a mapping with a non-name key
    # WHEN the analysis options are made (long before any load); THEN a UsageError naming the option
    with pytest.raises(UsageError, match="thresholds / --set / --thresholds"):
        AnalysisOptions(thresholds=thresholds)  # type: ignore[arg-type]


def test_an_unknown_or_out_of_range_threshold_is_refused_before_loading() -> None:
    # GIVEN a threshold override out of its declared range; WHEN analyze is called; THEN refused before loading
    with pytest.raises(UsageError, match="out of range"):
        perftracker.analyze(NOWHERE, analysis=AnalysisOptions(thresholds={"straggler.alpha": math.nan}))
    with pytest.raises(UsageError, match="unknown threshold|no threshold"):
        AnalysisOptions(thresholds={"straggler.alphaa": 0.01})


@pytest.mark.parametrize(("keywords", "named"), [
    ({"workers": -1}, "workers / --workers"), ({"workers": 1.5}, "workers / --workers"),
    ({"workers": True}, "workers / --workers"), ({"engine": "spark"}, "engine / --engine"),
    ({"comm_kernel_files": "kernels.toml"}, "comm_kernel_files / --comm-kernels"),
    ({"job": 3}, "job / --job"), ({"cache": 1}, "cache"), ({"progress": "yes"}, "progress"),
    ({"comm_kernel_patterns": ["ok", 7]}, "comm_kernel_patterns / --comm-kernel"),
])
def test_every_loading_option_is_checked_before_loading(keywords: dict[str, object], named: str) -> None:
    # GIVEN a loading option of the wrong kind or out of range; WHEN load is called; THEN a UsageError naming it
    with pytest.raises(UsageError, match=named):
        perftracker.load(NOWHERE, **keywords)  # type: ignore[arg-type]


def test_an_unknown_keyword_is_a_type_error_listing_the_options() -> None:
    # GIVEN a misspelt loading option; THEN a TypeError that lists the known ones
    with pytest.raises(TypeError, match="comm_kernel_patterns"):
        load_options(comm_kernel_pattern=["nccl"])  # type: ignore[call-arg]


def _cli_error(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize(("cli", "api"), [
    (["analyze", NOWHERE, "--comm-kernel", "my_allreduce("],
     lambda: perftracker.analyze(NOWHERE, comm_kernel_patterns=["my_allreduce("])),
    (["timeline", NOWHERE, "-o", "/tmp/t.json", "--max-events", "-5"],
     lambda: perftracker.timeline(NOWHERE, max_events=-5)),
    (["analyze", NOWHERE, "--engine", "spark"], lambda: perftracker.analyze(NOWHERE, engine="spark")),
])
def test_the_api_and_the_command_line_say_the_same_thing(cli: list[str], api: object, tmp_path: Path) -> None:
    # GIVEN the same bad value through the command line and through the API
    with pytest.raises(UsageError) as caught:
        api()  # type: ignore[operator]
    # THEN the command prints the API's message (exit 2)
    assert caught.value.message in _cli_error(*cli)


def test_a_list_of_patterns_still_selects_the_communication_kernels() -> None:
    # GIVEN the patterns as a list (and as a tuple); THEN the loading options hold them as they were given
    assert load_options(comm_kernel_patterns=["nccl", "a2a"], cache=False).comm_kernel_patterns == ("nccl", "a2a")
    assert load_options(comm_kernel_patterns=("x",), cache=False).comm_kernel_patterns == ("x",)


def test_one_list_of_public_names_and_each_resolves() -> None:
    # GIVEN the package's list of public names; THEN the API module keeps no second list, and each name resolves
    import perftracker.api as api

    assert not hasattr(api, "__all__")
    assert {"analyze", "diff", "load", "read", "timeline", "LoadKeywords"} <= set(perftracker.__all__)
    assert all(getattr(perftracker, name) is not None for name in perftracker.__all__)


def test_a_type_checker_sees_every_public_name_exported() -> None:
    # GIVEN the package front, whose API is imported lazily (only `TYPE_CHECKING` imports for type checkers)
    tree = ast.parse(Path(perftracker.__file__).read_text(encoding="utf-8"))
    listed = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    checked = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "perftracker.api" for a in node.names}
    # THEN `__all__` is a literal list of strings (a computed one hides every name from mypy --strict, so a user's
    # `perftracker.analyze(...)` is "not explicitly exported"), each an API name imported for the type checker
    assert isinstance(listed, ast.List) and all(isinstance(e, ast.Constant) for e in listed.elts)
    assert {e.value for e in listed.elts} - {"__version__"} == checked
