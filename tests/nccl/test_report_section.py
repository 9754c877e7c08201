"""The report's NCCL section: None without data, escaped HTML with deviations highlighted."""

from __future__ import annotations

from collections.abc import Callable

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.nccl.config import analyze_nccl_config
from perftracker.collectors.nccl.log import load_nccl_logs
from perftracker.reports.nccl_section import nccl_section
from perftracker.store import Store

from .conftest import FIXTURES


def test_section_absent_without_nccl_data() -> None:
    assert nccl_section(Store(), []) is None


def test_section_escapes_log_content_and_highlights(make_store: Callable[..., Store]) -> None:
    # GIVEN a log plus an env whose value carries HTML
    frames, _ = load_nccl_logs([FIXTURES / "mixed_job.log"])
    store = make_store([{"NCCL_IB_TC": "34", "NCCL_ALGO": "<script>x</script>"}], frames=frames)
    findings = analyze_nccl_config(Analysis(store))
    section = nccl_section(store, findings)
    assert section is not None and section.key == "nccl"
    assert "<script>" not in section.html and "&lt;script&gt;" in section.html
    assert 'class="nccl-warning"' in section.html
    assert "mlx5_1:1/RoCE" in section.html and "WARN line(s)" in section.html
