"""The trace kinds' evidence types declare what the positions pass adds: a finding of one rank gets `position`,
of several `positions` (analyzers/layout/views.py), on a job whose layout is known."""

from __future__ import annotations

import pytest

from perftracker.analyzers.findings import Finding, Kind, Severity
from perftracker.analyzers.layout.infer import infer_layout
from perftracker.analyzers.layout.views import with_positions
from perftracker.evidence import breaches
from tests.pipeline.test_layout import _megatron


@pytest.mark.parametrize("kind", [Kind.BREAKDOWN, Kind.IDLE, Kind.OVERLAP, Kind.EFFICIENCY])
def test_a_finding_of_one_rank_or_several_keeps_to_its_kind_s_type_after_the_positions_pass(kind: Kind) -> None:
    # GIVEN a Megatron job of 2 stages x 2 replicas, and a finding of this kind naming one rank and one naming two
    layout = infer_layout(_megatron(1, 2, 2), 4)
    one, two = Finding(kind, Severity.WARNING, "t", "r", ranks=(1,)), Finding(kind, Severity.INFO, "t", "r", ranks=(2, 3))
    # WHEN the positions pass adds where they sit
    placed = with_positions([one, two], layout)
    # THEN both findings hold only keys their kind's type declares
    assert "position" in placed[0].evidence and "positions" in placed[1].evidence
    assert [breaches(kind, f.evidence) for f in placed] == [[], []]
