"""`perftracker sanity` live on the namespace lab: a 3-node torchrun job (one rank per node, gloo over the lab's
bridge) whose node-b's egress is held to 20 Mbit/s by tc. One live case only (about 50 s on a loaded 2-core
machine); the clean, CPU-quota and killed-node cases are recorded runs judged in
tests/sanity/test_sanity_lab_matrix.py (scripts/record_sanity_lab.py records them)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from netlab import Lab
from record_sanity_lab import run_case

from perftracker.analyzers.findings import Severity
from perftracker.analyzers.sanity.judge import judge
from perftracker.analyzers.sanity.results import SanityResults


@pytest.mark.slow
def test_a_node_whose_link_is_shaped_is_named_live_and_left_out_of_the_hostfile(lab: Lab, tmp_path: Path) -> None:
    # GIVEN node-b's egress held to 20 Mbit/s while `torchrun -m perftracker sanity --time-box 20` runs on every node
    doc = run_case(lab, "rate", tmp_path, time_box=20.0, mbit=20.0, share=0.0, kill_after=0.0,
                   port=random.randint(20000, 60000))
    # THEN one rank wrote its files within 1.25x the box, naming node-b alone, on its links, with its shaper
    assert doc["lab"]["wrote"] and doc["elapsed_s"] <= 1.25 * 20, doc["lab"]
    verdict = judge(SanityResults.from_dict(doc))
    bad = [f for f in verdict.findings if f.severity >= Severity.WARNING]
    assert [(f.hosts, "links are slow" in f.title) for f in bad] == [(("node-b",), True)], [f.title for f in bad]
    assert "shaped by tc tbf: held to 20 Mbit/s" in bad[0].title
    out = tmp_path / "result"
    assert (out / "exclude.txt").read_text() == "node-b\n" and doc["lab"]["summary_exclude"] == ["node-b"]
    # AND every node's torchrun ended with the check (within 1.25x the box of the join)
    assert all(e is not None and e <= 1.25 * 20 for e in doc["lab"]["ended_after_join_s"]), doc["lab"]
    assert (out / "hostfile").read_text() == "node-a slots=1\nnode-c slots=1\n"
