"""The README is a first screen: at most 150 lines, the set-up commands first, a real report's picture, and
links that land on pages of the docs site."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short_and_starts_with_the_two_setup_commands() -> None:
    assert len(README.splitlines()) <= 150
    first_block = re.search(r"```\w*\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["bash scripts/demo.sh", "bash .ci/run"]
    assert (ROOT / "scripts" / "demo.sh").is_file() and (ROOT / ".ci" / "run").is_file()


def test_readme_links_and_picture_exist() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert "docs/img/report.png" in local
    assert [t for t in local if not (ROOT / t).exists()] == []
    assert (ROOT / "docs" / "img" / "report.png").stat().st_size > 20_000  # a real screenshot, not a stub


def test_readme_names_every_command_it_recommends() -> None:
    import typer.main

    from perftracker.cli import app

    commands = set(typer.main.get_command(app).list_commands(None))  # type: ignore[attr-defined, arg-type]
    named = set(re.findall(r"`(?:[^`]*-m )?perftracker ([a-z-]+)", README))
    assert named and named <= commands, named - commands
    assert "sanity" in named  # launched the way jobs are: `torchrun ... -m perftracker sanity`
