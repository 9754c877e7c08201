"""`perftracker COMMAND --help` reads as prose: no line break inside a sentence, and two or three examples at
the end of every command's description.

The help is rendered at a width no paragraph reaches (typer's TERMINAL_WIDTH), so that any line break left in
a paragraph is one the source put there, not the terminal's wrapping.
"""

from __future__ import annotations

import re

import pytest
import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.cli.voice import reflow_help

COMMANDS = sorted(typer.main.get_command(app).list_commands(None))  # type: ignore[attr-defined, arg-type]


def wide_help(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 2000)
    result = CliRunner().invoke(app, [*args, "--help"], env={"NO_COLOR": "1", "COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    return result.output


def description(help_text: str) -> list[list[str]]:
    """The paragraphs (lists of lines) between the usage line and the first panel."""
    body = help_text.split("Usage:", 1)[1].split("\n", 1)[1].split("╭", 1)[0]
    paragraphs = [[line.strip() for line in block.splitlines() if line.strip()] for block in re.split(r"\n\s*\n", body)]
    return [p for p in paragraphs if p]


def test_every_command_is_covered() -> None:
    assert {"analyze", "attach", "demo", "diff", "postmortem", "report", "run", "timeline"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_paragraphs_have_no_hard_breaks(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the command's help rendered wider than any paragraph WHEN read THEN each prose paragraph is one
    # line (the Examples block is one command per line)
    paragraphs = description(wide_help(monkeypatch, command))
    assert paragraphs, "no description"
    for lines in paragraphs:
        if lines[0].startswith("Examples:"):
            continue
        assert len(lines) == 1, f"a sentence broken across lines: {lines}"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_ends_with_examples(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the command's help WHEN its last paragraph is read THEN it is 2 or 3 example command lines
    last = description(wide_help(monkeypatch, command))[-1]
    assert last[0] == "Examples:", last
    examples = last[1:]
    # (a command launched the way jobs are, `torchrun ... -m perftracker sanity`, shows its launcher first)
    assert 2 <= len(examples) <= 3 and all(e.startswith(f"perftracker {command}") or f"-m perftracker {command} " in e
                                           for e in examples), examples


def test_the_command_list_has_one_line_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN `perftracker --help` wide WHEN the commands panel is read THEN no summary continues on a second line
    text = wide_help(monkeypatch)
    panel = text.split("Commands", 1)[1]
    rows = [line.strip("│ ").strip() for line in panel.splitlines() if line.startswith("│")]
    assert sorted(row.split()[0] for row in rows) == COMMANDS


def test_reflow_joins_lines_and_keeps_examples() -> None:
    text = """First line of a sentence
    that goes on.

    Examples:
      perftracker analyze a/
      perftracker analyze b/
    """
    assert reflow_help(text) == ("First line of a sentence that goes on.\n\n"
                                 "Examples:\nperftracker analyze a/\nperftracker analyze b/")
