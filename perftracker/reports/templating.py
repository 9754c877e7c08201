"""The one Jinja environment of every page perftracker renders.

Promise: `ENV` loads the templates of `perftracker/reports/templates/`, escapes everything it inserts
(autoescape, also for `.j2` files) and fails on an undefined name (`StrictUndefined`) instead of rendering
an empty string. Every renderer (report.html, diff.html, the demo's index.html, a notebook's view of a run)
takes its templates from here, so the escaping rules are one.
"""

from __future__ import annotations

import jinja2

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perftracker.reports", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
    undefined=jinja2.StrictUndefined,
)
