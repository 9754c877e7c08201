"""The Python API as a notebook user meets it: `perftracker.analyze` / `diff` / `load` give what the commands
give, in memory, and write nothing until asked; `import perftracker` and an analysis import no renderer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import markupsafe
import pandas as pd
import pytest
from typer.testing import CliRunner

import perftracker
from perftracker.cli import app
from perftracker.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SLOW = REPO / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
CORPUS = REPO / "tests" / "fixtures" / "accuracy"
CLEAN, EXTRA = CORPUS / "clean-repro-a", CORPUS / "inproc-rank2-x5-repro"


def _cli(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)


def _everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_analyze_gives_the_commands_findings_in_memory_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an empty working folder, and the parsed-trace cache elsewhere
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    # WHEN a notebook analyzes a sample run
    run = perftracker.analyze(SLOW, workers=1)
    # THEN it has the CLI's findings, in the same order, and the verdict of its findings.json
    _cli("analyze", str(SLOW), "-o", str(tmp_path / "cli"), "--workers", "1")
    document = json.loads((tmp_path / "cli" / "findings.json").read_text())
    assert [f.id for f in run.findings] == [f["id"] for f in document["findings"]]
    assert run.verdict == document["summary"]["verdict"] and "Rank 2" in run.verdict
    # AND its views are DataFrames (the steps of 4 ranks), its findings a table
    steps = run.view("steps")
    assert isinstance(steps, pd.DataFrame) and sorted(steps["rank"].unique()) == [0, 1, 2, 3]
    assert list(run.findings_frame()["id"]) == [f.id for f in run.findings]
    with pytest.raises(KeyError, match="the views are: run_summary"):
        run.view("no-such-view")
    # AND nothing was written in the working folder (the cache went to its own folder)
    assert _everything_under(work) == []
    # AND in a notebook it shows its verdict and findings, escaped
    page = run._repr_html_()
    assert "Rank 2 spends" in page and run.findings[0].id in page and "&#39;forward&#39;" in page


def test_write_writes_what_analyze_writes_and_read_gives_it_back(tmp_path: Path) -> None:
    # GIVEN an analyzed run WHEN it is written
    run = perftracker.analyze(SLOW, cache=False, workers=1)
    report = run.write(tmp_path / "out")
    # THEN the folder holds the report, findings.json and the tables, as `perftracker analyze -o` writes them
    assert report == tmp_path / "out" / "report.html" and report.is_file()
    assert (tmp_path / "out" / "tables" / "steps.parquet").is_file()
    # AND reading it back gives the same findings and tables
    again = perftracker.read(tmp_path / "out")
    assert [f.id for f in again.findings] == [f.id for f in run.findings] and again.verdict == run.verdict
    assert len(again.view("steps")) == len(run.view("steps"))
    with pytest.raises(InputError, match="no saved analysis here"):
        perftracker.read(tmp_path)


def test_diff_gives_the_commands_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two real runs of one job, the second with extra forward work on rank 2
    monkeypatch.chdir(tmp_path)
    # WHEN the API compares them, and the command does
    change = perftracker.diff(CLEAN, EXTRA, workers=1)
    result = CliRunner().invoke(app, ["diff", str(CLEAN), str(EXTRA), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    # THEN both name the same changes, rank 2 first
    document = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert [f.id for f in change.findings] == [f["id"] for f in document["findings"]]
    assert change.findings[0].ranks == (2,) and change.findings[0].severity.label == "warning"
    # AND the verdict is one sentence, said the same on the terminal, in diff.json and in diff.html
    assert change.verdict.startswith("1 change(s) beyond the runs' noise. Top: Rank 2 changed")
    assert result.output.splitlines()[0] == change.verdict == document["summary"]["verdict"]
    page = (tmp_path / "out" / "diff.html").read_text()
    assert str(markupsafe.escape(change.verdict)) in page
    # AND the API wrote nothing itself (the command wrote only under -o)
    assert _everything_under(tmp_path)[0] == "out"


def test_load_is_a_context_manager_and_options_are_checked() -> None:
    # GIVEN a sample run WHEN it is loaded in a with block
    with perftracker.load(SLOW, cache=False, workers=1) as store:
        # THEN its tables are there
        assert store.n_events > 0 and not store.steps.empty
    # AND an option that is not one is said, with the ones there are
    with pytest.raises(TypeError, match="unknown option.*worker.*the loading options are: cache"):
        perftracker.analyze(SLOW, worker=1)


def test_import_and_analysis_import_no_renderer_or_engine() -> None:
    # GIVEN a fresh interpreter WHEN perftracker is imported and a run analyzed (no report rendered)
    code = ("import sys, perftracker\n"
            "heavy = ('plotly', 'jinja2', 'ray', 'typer', 'rich')\n"
            "print([m for m in heavy if m in sys.modules])\n"
            f"perftracker.analyze({str(SLOW)!r}, cache=False, workers=1)\n"
            "print([m for m in heavy if m in sys.modules])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    # THEN neither import pulled in plotly, Jinja, Ray or the command-line libraries
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "[]"]


def test_the_notebook_example_runs_and_writes_only_where_asked(tmp_path: Path) -> None:
    # GIVEN the guide's example script (docs/examples/python_api.py), run from an empty folder
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # WHEN it runs, cell by cell, with an output folder for its last cell
    out = subprocess.run([sys.executable, str(REPO / "docs" / "examples" / "python_api.py"), str(REPO),
                          str(tmp_path / "report")], capture_output=True, text=True, timeout=600, env=env, cwd=work)
    # THEN it says the verdicts, and wrote only its report
    assert out.returncode == 0, out.stderr
    assert "Top: Rank 2 is a persistent compute straggler" in out.stdout and "Top: Rank 2 changed" in out.stdout
    assert _everything_under(work) == [] and (tmp_path / "report" / "report.html").is_file()


def test_timeline_marks_the_findings_of_the_report(tmp_path: Path) -> None:
    # GIVEN a run whose report has warnings on ranks (a throttled GPU's rank, a straggler)
    sample = REPO / "sample_traces" / "synthetic-gpu-4rank-thermal"
    _cli("analyze", str(sample), "-o", str(tmp_path / "out"), "--no-cache")
    document = json.loads((tmp_path / "out" / "findings.json").read_text())
    # WHEN its timeline is merged by the command
    _cli("timeline", str(sample), "-o", str(tmp_path / "t.json"), "--no-cache")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    # THEN the findings marked on it are the report's warnings and criticals, rank by rank (the same analysis,
    # root-cause join included)
    marked = sorted((e["pid"], e["args"]["detail"]) for e in events if e["ph"] == "i" and "detail" in e.get("args", {})
                    and e["name"].startswith(("warning:", "critical:")))
    expected = sorted((r, f["title"]) for f in document["findings"] if f["severity"] != "info" for r in f["ranks"][:8])
    assert marked == expected and marked


def test_diff_of_runs_whose_op_tables_share_nothing_compares_what_there_is() -> None:
    # GIVEN two sample runs of different jobs: one has step times, the other's ops share no rank/op row with it
    # (before, numpy's log met object columns from the outer join: an internal error, exit 70)
    change = perftracker.diff(SLOW, REPO / "sample_traces" / "attach-4rank-slow-rank2", cache=False, workers=1)
    # THEN the comparison says what it could compare and what it could not
    titles = [f.title for f in change.findings]
    assert "No step times on one side: only ops and settings are compared" in titles
    assert change.verdict == "No change beyond the noise of running the same job twice."


def test_the_command_line_starts_without_torch_or_ray() -> None:
    # GIVEN a fresh interpreter WHEN the command-line app is imported (what `perftracker --help` and every command
    # do first)
    code = "import sys, perftracker.cli\nprint([m for m in ('torch', 'ray', 'plotly') if m in sys.modules])\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    # THEN neither torch (seconds to import; only `sanity` and the job's own hook need it) nor Ray nor plotly came
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]"]
