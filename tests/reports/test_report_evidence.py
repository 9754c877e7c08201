"""A finding's evidence in the report is a small table a person reads: units, rounded numbers, sub-tables."""

from __future__ import annotations

import re
from pathlib import Path

from perftracker.analyzers.findings import Finding, Severity
from perftracker.evidence import declared, field_of
from perftracker.evidence.units import EvidenceField
from perftracker.reports.evidence import evidence_items, number
from perftracker.reports.html import build_sections, render


def test_units_come_from_the_key_and_numbers_are_rounded() -> None:
    # GIVEN keys as the analyzers write them; THEN the unit leaves the label and goes with the value
    assert field_of("idle_ms_per_step") == EvidenceField("idle", "ms", "per step")
    assert field_of("comm_ms_total") == EvidenceField("comm total", "ms")
    assert field_of("temp_c_median").header == "temp median (°C)"
    assert field_of("share_last").unit == "share" and field_of("start_ns").unit == "timestamp"
    # AND numbers keep 3 significant digits, thousands grouped, shares as percentages, ns and bytes scaled
    assert [number(171.4321, "ms"), number(0.012345, "ms"), number(12.0), number(1234567)] == [
        "171 ms", "0.0123 ms", "12", "1,234,567"]
    assert [number(0.465, "share"), number(2_500_000, "ns"), number(3 * 2**20, "bytes")] == ["46.5%", "2.5 ms", "3 MiB"]


def test_units_are_declared_by_each_kind_and_an_undeclared_key_falls_back_to_its_name() -> None:
    # GIVEN the evidence types of the finding kinds (perftracker/evidence/)
    # THEN a declared key's unit is its type's, even where its name would say otherwise: a silent host's last
    # sample is a wall-clock instant, not a duration in ns
    assert "last_sample_ns" in declared("silent_host") and field_of("last_sample_ns", "silent_host").unit == "timestamp"
    items = {i.label: i.text for i in evidence_items({"last_sample_ns": 1_700_000_000_123_456_789}, "silent_host")}
    assert items == {"last sample": "1700000000123456789"}
    # AND the unit of a record's column comes from the record's type: a crash's wait-for root window, an
    # interface's speed, the epoch time of a GPU's first Xid
    assert field_of("window_ns", "crash").unit == "timestamp"
    assert field_of("speed_mbps", "links").header == "speed (Mb/s)"
    assert field_of("xid_times_ns", "gpu_health").unit == "timestamp"
    assert field_of("reported_tflops_per_gpu_median", "efficiency").unit == "TFLOPS"
    # AND a link's drop rates read as a rate per second, and the stall while it was down in seconds
    assert field_of("per_s", "links").header == "rate (per s)"
    assert field_of("seconds", "links").header == "seconds (s)"
    # AND a key no kind declares (a plugin's, a newer branch's) still renders with the unit its name says
    assert "plugin_wait_ms_per_step" not in declared("straggler")
    assert field_of("plugin_wait_ms_per_step", "straggler") == EvidenceField("plugin wait", "ms", "per step")


def test_records_become_sub_tables_and_lists_short_text() -> None:
    # GIVEN evidence with a per-rank map of records, a list of records, a list of ranks and a nested value
    evidence = {"per_rank": {"0": {"idle_ms_per_step": 102.259, "gaps": 5122}, "1": {"idle_ms_per_step": 3.5}},
                "slower_ops": [{"name": "aten::mm", "extra_ms_per_step": 1.23456}],
                "waiting_ranks": list(range(20)), "kind": "compute", "share_last": 0.875,
                "deep": {"a": [1, 2], "b": {"c": 1}}, "synthetic": True}
    # WHEN turned into report items
    items = {i.label: i for i in evidence_items(evidence)}
    # THEN the per-rank map is a table with a rank column and unit headers, rounded cells
    per_rank = items["per rank"].table
    assert per_rank is not None
    assert per_rank.head == ["rank", "idle (ms per step)", "gaps"]
    assert per_rank.rows == [["0", "102", "5,122"], ["1", "3.5", ""]]
    assert per_rank.numeric == [True, True, True]
    # AND a list of records is a table too, a long list of scalars a short line, scalars with their unit
    slower = items["slower ops"].table
    assert slower is not None and slower.head == ["name", "extra (ms per step)"] and slower.rows == [["aten::mm", "1.23"]]
    assert items["waiting ranks"].text == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 (+4 more)"
    assert items["share last"].text == "87.5%" and items["kind"].text == "compute" and items["synthetic"].text == "yes"
    # AND deeper values are short text in a two-column table
    deep = items["deep"].table
    assert deep is not None and deep.rows == [["a", "1, 2"], ["b", "c: 1"]]


def test_the_report_shows_evidence_tables_not_raw_json(tmp_path: Path) -> None:
    # GIVEN a finding whose evidence holds a per-rank map and markup from a trace
    finding = Finding(analyzer="idle", severity=Severity.WARNING, title="t", recommendation="r",
                      evidence={"per_rank": {"3": {"idle_ms_per_step": 1.5}}, "measured_over": "<b>k</b>"})
    # WHEN the report is rendered
    render(tmp_path / "report.html", [finding], [], build_sections({}, [finding])[0], "x")
    page = (tmp_path / "report.html").read_text()
    # THEN the evidence is a table with its label, unit header and rounded value, escaped, and no JSON dump
    block = re.search(r'<details class="evidence">(.*?)</details>', page, re.S)
    assert block is not None
    assert "<th class=\"l\">per rank</th>" in block.group(1) and "idle (ms per step)" in block.group(1)
    assert "&lt;b&gt;k&lt;/b&gt;" in block.group(1) and "<b>k</b>" not in page
    assert '"idle_ms_per_step"' not in page and "<pre>" not in block.group(1)
    assert "findings.json" in block.group(1)
