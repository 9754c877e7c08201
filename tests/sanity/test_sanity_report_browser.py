"""The sanity report of a large cluster in headless Chromium: a synthetic 16 x 8 and 512 x 4 GPU cluster (made
up, labelled so on the page) reads as the small lab's does: the bad nodes first, nothing wider than the window
at a desktop's or a phone's width (the wide table scrolls in its own box), no console error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perftracker.analyzers.sanity.judge import judge
from perftracker.cli.sanity import write_outputs
from tests.reports.test_report_browser import DESKTOP, NARROW, assert_reads_cleanly, render_checked
from tests.sanity.test_sanity_judge import _synthetic


@pytest.mark.slow
@pytest.mark.parametrize(("nodes", "gpus"), [(16, 8), (512, 4)])
def test_a_large_cluster_s_sanity_report_reads_cleanly_in_a_browser(nodes: int, gpus: int, tmp_path: Path) -> None:
    # GIVEN a synthetic cluster's check (one throttled GPU, one slow NIC) judged and written
    results = _synthetic(nodes, gpus, seed=nodes)
    write_outputs(tmp_path / "out", results, judge(results))
    page = tmp_path / "out" / "report.html"
    # WHEN opened at a desktop's and a phone's width
    for size, name in ((DESKTOP, "desktop"), (NARROW, "narrow")):
        dom, stderr, check = render_checked(page, tmp_path / f"profile-{name}", size, tmp_path / f"{name}.png")
        # THEN it reads cleanly, says its figures are synthetic, and the table starts with the two bad nodes
        assert_reads_cleanly(check, stderr, charts=0)
        assert "Synthetic inputs." in dom
        table = dom[dom.index('id="sanity"'):]
        healthy = re.search(r"<td[^>]*>ok</td>", table)
        assert healthy is not None and table.index("gpu005") < table.index("gpu009") < healthy.start()
        assert "between-node all-reduce busbw GB/s" in table and "in-node all-reduce busbw GB/s" in table
