"""`perftracker report OUT` redraws a report from an output folder whose tables were edited or damaged.

Promise checked: a table of the wrong shape or a file that is not Parquet costs only its own section,
which the report's input notes name; the page is still written, and nothing from the table is rendered
as markup.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from api_helpers import analyzed

from perftracker.outputs import render_report

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


def test_damaged_tables_cost_only_their_section(tmp_path: Path) -> None:
    # GIVEN an analysis output whose step table has text where numbers belong and whose step series is not Parquet
    out = analyzed(SAMPLE, tmp_path / "out", cache=False, workers=1).out_dir
    pd.DataFrame({"rank": ["<b>x</b>", "y"], "median_s": ["a", "b"]}).to_parquet(out / "tables" / "step_stats.parquet")
    (out / "tables" / "steps.parquet").write_bytes(b"not parquet")
    # WHEN the report is redrawn from it
    page = render_report(out).read_text()
    # THEN the page is written, the steps section is named as left out, the others are there
    assert "report section steps" in page and 'id="findings"' in page and 'id="kernels"' in page
    assert "<b>x</b>" not in page
