"""The report's NCCL section: None without data, escaped HTML with the variables findings are about highlighted."""

from __future__ import annotations

import re
from collections.abc import Callable

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.nccl.config import analyze_nccl_config, flags
from perftracker.analyzers.views import report_tables
from perftracker.collectors.nccl.log import load_nccl_logs
from perftracker.reports.health_sections import nccl_section
from perftracker.reports.html import render_section
from perftracker.store import Store

from .conftest import FIXTURES


def test_section_absent_without_nccl_data() -> None:
    # GIVEN a run without NCCL log or configuration; THEN there is no NCCL section
    assert nccl_section(report_tables(Analysis(Store())), []) is None


def test_section_escapes_log_content_and_highlights(make_store: Callable[..., Store]) -> None:
    # GIVEN a log plus an env whose value carries HTML
    frames, _ = load_nccl_logs([FIXTURES / "mixed_job.log"])
    store = make_store([{"NCCL_IB_TC": "34", "NCCL_ALGO": "<script>x</script>"}], frames=frames)
    analysis = Analysis(store)
    findings = analyze_nccl_config(analysis)
    # WHEN the section is built from the report views and rendered
    section = nccl_section(report_tables(analysis), findings)
    assert section is not None and section.key == "nccl"
    html = render_section(section)
    # THEN log and env content is escaped, the flagged variables' values are highlighted
    assert "<script>" not in html and "&lt;script&gt;" in html
    highlighted = re.findall(r'class="nccl-(critical|warning|info)">([^<]*)<', html)
    assert ("warning", "34") in highlighted  # NCCL_IB_TC=34 looks like a DSCP value
    assert ("warning", "&lt;script&gt;x&lt;/script&gt;") in highlighted  # NCCL_ALGO forced
    assert "mlx5_1:1/RoCE" in html and "WARN line(s)" in html


def test_flagged_variables_come_from_the_rules_with_their_worst_severity(make_store: Callable[..., Store]) -> None:
    # GIVEN NCCL_IB_TC written as a DSCP value on one rank (warning) and out of range on another (critical),
    # NCCL_ALGO forced (warning) and a WARN line whose text names no setting of the job
    from perftracker.analyzers.nccl.tables import nccl_flagged_table

    frames, _ = load_nccl_logs([FIXTURES / "mixed_job.log"])
    store = make_store([{"NCCL_IB_TC": "34", "NCCL_ALGO": "Ring"}, {"NCCL_IB_TC": "300", "NCCL_ALGO": "Ring"}],
                       frames=frames)
    # WHEN the report's flagged-variable view is computed
    analysis = Analysis(store)
    flagged = dict(nccl_flagged_table(analysis).itertuples(index=False))
    # THEN it names each variable a rule judged, with the worst severity of the findings about it, and
    # only those: the WARN and completion-error findings (log text in their titles) name no variable
    assert flagged == {"NCCL_IB_TC": "critical", "NCCL_ALGO": "warning"}
    assert flags(analyze_nccl_config(analysis)) >= {"nccl_warn", "ib_completion_error"}  # merged problems too
