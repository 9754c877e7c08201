"""The documentation site: its generated pages are current, and it builds with `mkdocs build --strict`.

The pages scripts/gen_docs.py writes (the commands from the typer app, the findings catalog from the
analyzer registry, the report tables from REPORT_VIEWS, the home page from README.md) are compared with a
fresh generation, so they cannot drift from the code. The site build runs offline (nothing in mkdocs.yml
fetches) and strictly: a broken link, a missing anchor or a page left out of the nav fails it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import gen_docs  # noqa: E402  (scripts/ is not a package)


def test_generated_pages_are_current(demo_outputs: Path) -> None:
    # GIVEN the code as it is WHEN the reference pages are generated afresh THEN the committed ones equal them
    pages = gen_docs.generate(demo_outputs)
    assert gen_docs.stale(pages) == [], "run: python scripts/gen_docs.py (and commit the pages)"


def test_generated_pages_name_every_command_analyzer_and_table(demo_outputs: Path) -> None:
    from perftracker.analyzers.registry import BUILTIN
    from perftracker.analyzers.views import REPORT_VIEWS

    pages = {path.relative_to(gen_docs.DOCS).as_posix(): text for path, text in gen_docs.generate(demo_outputs).items()}
    root = gen_docs._click_root()
    assert all(f"## perftracker {name}\n" in pages["reference/cli.md"] for name in root.list_commands(None))
    assert all(f"## {a.name}\n" in pages["reference/findings.md"] for a in BUILTIN)
    assert all(f"### {name}\n" in pages["reference/report-tables.md"] for name in REPORT_VIEWS)
    # the sample runs fill the main tables, so their columns are documented, not just their names
    assert "| `share_pct` |" in pages["reference/report-tables.md"]


def test_a_changed_docstring_makes_the_page_stale(demo_outputs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an analyzer whose description changes WHEN the pages are generated THEN the committed page is stale
    from perftracker.analyzers import registry

    first = registry.BUILTIN[0]
    monkeypatch.setattr(registry, "BUILTIN", (type(first)(first.name, first.fn, "Changed."), *registry.BUILTIN[1:]))
    assert [p.name for p in gen_docs.stale({gen_docs.DOCS / "reference/findings.md": gen_docs.findings_page()})] \
        == ["findings.md"]


def test_site_builds_strictly_offline(tmp_path: Path) -> None:
    # GIVEN mkdocs.yml and docs/ WHEN `mkdocs build --strict` runs THEN it succeeds (warnings are errors)
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail("mkdocs and mkdocs-material are not installed: pip install -e '.[docs]' (CI does)")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    assert "fonts.googleapis.com" not in (tmp_path / "site" / "index.html").read_text()
