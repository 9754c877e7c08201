"""The one Jinja environment of every page perftracker renders: `ENV` loads `perftracker/reports/templates/`,
escapes everything it inserts and fails on an undefined name (`StrictUndefined`); `write_page` writes a page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from perftracker._version import __version__
from perftracker.rundir import atomic_write_text

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perftracker.reports", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
    undefined=jinja2.StrictUndefined,
)


def write_page(path: Path, template: str, **values: Any) -> None:
    """`template` rendered with `values`, the version and the time of writing (`generated_at`), written to `path`."""
    atomic_write_text(path, ENV.get_template(template).render(
        **values, version=__version__, generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")))
