"""What a new user sees first, said right: plurals, no doubled parentheses, no table of dashes on a CPU-only
run, help texts that are not eaten by Rich markup and name only options the command has."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import perftracker
from perftracker.analyzers.findings import Finding, Severity
from perftracker.cli import app
from perftracker.reports.efficiency_section import efficiency_section
from perftracker.reports.json_report import verdict

CPU_ONLY = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _finding(n: int, severity: Severity) -> Finding:
    return Finding(analyzer="a", severity=severity, title=f"thing {n}", recommendation="r", key=str(n))


@pytest.mark.parametrize(("severities", "head"), [
    ([Severity.WARNING] * 5, "5 warnings."), ([Severity.WARNING], "1 warning."),
    ([Severity.CRITICAL] * 2 + [Severity.WARNING] * 3, "2 critical, 3 warnings."),
])
def test_the_verdict_counts_warnings_in_the_plural(severities: list[Severity], head: str) -> None:
    # GIVEN several warnings; THEN the verdict says "5 warnings", not "5 warning"
    assert verdict([_finding(i, s) for i, s in enumerate(severities)]).startswith(head)


def test_a_cpu_only_run_has_no_efficiency_section_of_dashes_and_no_doubled_parentheses() -> None:
    # GIVEN a real CPU-only (gloo) run, whose ops have shapes but no GPU time
    run = perftracker.analyze(CPU_ONLY, cache=False)
    # THEN the report has no Efficiency section (rates against a GPU's roofs would all be "-")
    assert efficiency_section(run.tables, run.findings) is None
    # AND no finding title doubles its parentheses ("((no device name in the trace))")
    assert not [f.title for f in run.findings if "((" in f.title]


def test_help_texts_show_brackets_and_name_only_options_the_command_has() -> None:
    # GIVEN the help of analyze; THEN the TOML example keeps its [table] header (not eaten as Rich markup)
    assert "or [straggler] then alpha = 0.005" in _help("analyze")
    # AND run --watch does not point at a --duration that run lacks
    run_help = _help("run")
    assert "--watch" in run_help and "--duration" not in run_help
    # AND diff and timeline do not point at a --workers they lack; analyze, which has it, still does
    for command in ("diff", "timeline"):
        text = _help(command)
        assert "--ray-address" in text and "--workers" not in text, command
    assert "--workers CPUs" in _help("analyze")


@pytest.mark.parametrize("page", ["mkdocs.yml", "docs/development.md", "README.md"])
def test_the_test_files_a_page_names_exist(page: str) -> None:
    # GIVEN a page that points at test files (mkdocs.yml named a tests/docs/test_site.py that never existed)
    import re

    root = CPU_ONLY.parents[1]
    named = set(re.findall(r"tests/[\w/]+\.py", (root / page).read_text(encoding="utf-8")))
    # THEN each of them exists
    assert [n for n in named if not (root / n).is_file()] == []
