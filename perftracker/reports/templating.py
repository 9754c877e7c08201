"""The one Jinja environment of every page perftracker renders: `ENV` loads `perftracker/reports/templates/`,
escapes everything it inserts and fails on an undefined name (`StrictUndefined`).
"""

from __future__ import annotations

import jinja2

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perftracker.reports", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
    undefined=jinja2.StrictUndefined,
)
