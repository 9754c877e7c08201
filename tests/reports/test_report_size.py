"""report.html stays one light offline file: the cartesian plotly.js bundle, compressed, and nothing it cannot draw.

Promise checked: every bundled sample's report is at most 1.5 MiB (1,572,864 bytes); the vendored bundle
is the plotly.js version plotly.py ships (so figures plotly.py builds match the library that draws
them; scripts/vendor_plotly.sh refreshes it); every figure of every sample uses only trace types the
cartesian bundle holds. (That the charts draw in a browser: tests/reports/test_report_browser.py.)
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from api_helpers import analyzed
from plotly.offline import get_plotlyjs

from perftracker.reports import html as html_report

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
LIMIT = 1_572_864


def _version(js_head: str) -> str:
    match = re.search(r"plotly\.js(?: \([a-z -]+\))? v(\d+\.\d+\.\d+)", js_head)
    assert match, js_head[:200]
    return match.group(1)


def test_the_vendored_bundle_is_the_plotly_js_that_plotly_py_ships() -> None:
    # GIVEN the compressed bundle inlined in every report
    data = (Path(html_report.__file__).parent / "assets" / html_report.PLOTLY_ASSET).read_bytes()
    # THEN it unpacks to plotly.js's cartesian bundle of the same version as plotly.py's full one
    head = gzip.decompress(data)[:400].decode("utf-8", "replace")
    assert "cartesian" in head and _version(head) == _version(get_plotlyjs()[:400])


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_sample_report_is_light_and_draws_only_what_the_bundle_holds(tmp_path: Path, sample: str) -> None:
    # GIVEN a bundled sample run WHEN analyzed
    result = analyzed(SAMPLES / sample, tmp_path / "out", cache=False, workers=1)
    # THEN its report is at most 1.5 MiB
    size = result.report_path.stat().st_size
    assert size <= LIMIT, f"{sample}: report.html is {size} bytes"
    # AND every trace of every figure is of a type the cartesian bundle draws
    html = result.report_path.read_text()
    figures = json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>', html, re.S).group(1))
    types = {trace.get("type", "scatter") for fig in figures.values() for trace in fig["data"]}
    assert types <= html_report.PLOTLY_TRACE_TYPES, types - html_report.PLOTLY_TRACE_TYPES
