"""The command line's small print: help that lists switches as switches and choices as choices, sentences
that keep paths as written, and a timeline of a run without traces said as one line.

Promise checked: no command's `--help` shows `<bool>` (typer's help option included); `--fail-on` lists
warning|critical and `--profile` the shipped profiles; a hint or note that starts with a path or a
command keeps its case; `timeline` of a run with no profiler trace exits 2 with one line and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.collectors.nccl.profiles import shipped_profiles
from perftracker.errors import InputError, sentence_start

COMMANDS = ["analyze", "report", "diff", "timeline", "demo", "ps", "attach", "run", "postmortem", "lint-env", "sanity"]
SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", [*COMMANDS, ""])
def test_help_shows_switches_without_a_value_and_choices(command: str) -> None:
    # GIVEN each command's help (and the top-level one)
    text = _help(*([command] if command else []))
    # THEN no switch, --help included, is shown as taking a <bool>
    assert "--help" in text and "<bool>" not in text
    # AND flags with a fixed set of values list them
    if "--fail-on " in text:
        assert "warning|critical" in text
    if "--profile " in text:
        assert "|".join([*shipped_profiles(), "FILE"]) in text


def test_sentences_keep_paths_and_commands_as_written() -> None:
    # GIVEN hints that start with a plain word, a relative path, a command
    # THEN only the plain word is capitalized
    assert sentence_start("give -o a folder") == "Give -o a folder"
    assert sentence_start("post-mortem inputs: 1 job log") == "Post-mortem inputs: 1 job log"
    assert sentence_start("shared/traces/rank0.json: cut off") == "shared/traces/rank0.json: cut off"
    assert sentence_start("perftracker run -- python train.py") == "perftracker run -- python train.py"
    assert InputError("cannot read", "x.json", "sample_traces/README.md says where").message == \
        "x.json: cannot read. sample_traces/README.md says where."


def test_timeline_of_a_run_without_traces_is_one_line(tmp_path: Path) -> None:
    # GIVEN a run with NCCL logs and counters but no profiler trace WHEN merged into a timeline
    out = tmp_path / "t.json.gz"
    result = CliRunner().invoke(app, ["timeline", str(SAMPLES / "nccl-roce-2node-misconfig"), "-o", str(out),
                                      "--no-cache"])
    # THEN it says so in one line (exit 2) and writes no empty trace
    assert result.exit_code == 2 and not out.exists()
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perftracker: ") and "no profiler trace events" in lines[0]


def test_demo_from_a_wheel_says_where_the_samples_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN perftracker installed away from any checkout (as from a wheel), run where there is no sample_traces/
    import perftracker.cli.demo as demo_module
    monkeypatch.setattr(demo_module, "__file__", str(tmp_path / "site-packages" / "perftracker" / "cli" / "demo.py"))
    monkeypatch.chdir(tmp_path)
    # WHEN the demo runs THEN it says in one line (exit 2) that a wheel carries no samples and what to do
    result = CliRunner().invoke(app, ["demo", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and line.startswith("perftracker: demo: the sample runs are not installed")
    assert "--samples DIR" in line and "scripts/demo.sh" in line
    # AND --samples points it at a copy (here an empty one, which it names)
    (tmp_path / "copy").mkdir()
    result = CliRunner().invoke(app, ["demo", "--samples", str(tmp_path / "copy"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "no sample run in sample_traces/" in result.output
    # AND from ./sample_traces it finds them by itself
    (tmp_path / "sample_traces").mkdir()
    assert demo_module.sample_traces_dir() == tmp_path / "sample_traces"
