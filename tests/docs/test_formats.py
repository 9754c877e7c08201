"""The run directory is described in two places that must agree: the developer page's section on
perftracker/rundir.py (docs/internals/core.md) and the Formats page (docs/formats/run-directory.md, for users).
Every `<run>/<folder>` one names, the other names too."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def entries(text: str) -> set[str]:
    """The top-level names of the layout: `<run>/traces/...` -> traces, `<run>/manifest.json` -> manifest.json."""
    return {m.group(1) for m in re.finditer(r"<run>/([A-Za-z_.-]+)", text)}


def test_the_module_and_the_page_list_the_same_run_directory() -> None:
    internals = (ROOT / "docs" / "internals" / "core.md").read_text(encoding="utf-8")
    module = entries(internals.split("### `perftracker/rundir.py`")[1].split("\n## ")[0])
    page = entries((ROOT / "docs" / "formats" / "run-directory.md").read_text(encoding="utf-8"))
    assert {"traces", "steps", "profiles", "incidents", "manifest.json"} <= module
    assert module == page, {"only in docs/internals/core.md": module - page, "only in the page": page - module}
