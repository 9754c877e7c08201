"""One order everywhere: findings.json, the verdict's "Top:", the terminal and the report list findings by
severity first, then cost, then confidence."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from api_helpers import analyzed

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
RANK = {"critical": 2, "warning": 1, "info": 0}


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith(".")))
def test_findings_json_and_verdict_agree_on_the_order(sample: str, tmp_path: Path) -> None:
    # GIVEN a bundled sample run, analyzed
    doc = analyzed(SAMPLES / sample, tmp_path / "out", cache=False, workers=1).document
    found = doc["findings"]
    # THEN findings.json is ordered by severity, then cost
    keys = [(RANK[f["severity"]], f["cost"]["seconds_per_step"]) for f in found]
    assert keys == sorted(keys, reverse=True)
    # AND the verdict's "Top:" is the first actionable finding
    actionable = [f for f in found if f["severity"] != "info"]
    if actionable:
        assert doc["summary"]["verdict"].split("Top: ", 1)[1].startswith(actionable[0]["title"])
    # AND the report lists them in the same order
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert re.findall(r'id="finding-([^"]+)"', html) == [f["id"] for f in found]


def test_the_terminal_lists_findings_in_the_same_order(tmp_path: Path) -> None:
    # GIVEN the post-mortem sample (a critical hang and cheaper warnings)
    out = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(SAMPLES / "gloo-4rank-stall-rank2"),
                          "-o", str(tmp_path / "out"), "--no-cache"], capture_output=True, text=True,
                         env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    import json

    found = json.loads((tmp_path / "out" / "findings.json").read_text())["findings"]
    # WHEN the terminal table is read; THEN its severities are in the findings.json order
    printed = [line.split("│")[1].strip() for line in out.stdout.splitlines()
               if line.count("│") >= 4 and line.split("│")[1].strip() in RANK]
    assert printed == [f["severity"] for f in found][:len(printed)] and printed[0] == found[0]["severity"]
