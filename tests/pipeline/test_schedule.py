"""The pipeline room's schedule model: pass orders, ideal bubble, the simulator and schedule recognition (exact)."""

from __future__ import annotations

import pandas as pd
import pytest

from perftracker.analyzers.pipeline.schedule_sim import ideal_bubble, pass_order, recognize, simulate


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (3, 1)])
def test_equal_stages_take_m_plus_p_minus_1_slots(kind: str, p: int, m: int) -> None:
    """GIVEN p equal stages (forward 1, backward 2) and m micro-batches WHEN simulated
    THEN the step is (m + p - 1) x 3 and its idle share is the ideal bubble (p - 1) / (m + p - 1)."""
    makespan = simulate(kind, [1.0] * p, [2.0] * p, m)
    assert makespan == pytest.approx((m + p - 1) * 3.0)
    idle_share = 1 - m * 3.0 / makespan
    assert idle_share == pytest.approx(ideal_bubble(p, m))


def test_heavy_last_stage_sets_the_pace() -> None:
    """GIVEN 2 stages, the last ~2.7x the first, 4 micro-batches, 1F1B WHEN simulated, then balanced
    THEN the heavy stage runs back to back (its 4 micro-batches plus the first stage's forward and backward)
    and an even split of the same compute is shorter."""
    now = simulate("1f1b", [1.0, 8 / 3], [2.0, 16 / 3], 4)
    assert now == pytest.approx(1.0 + 4 * 8.0 + 2.0)
    balanced = simulate("1f1b", [11 / 6] * 2, [11 / 3] * 2, 4)
    assert balanced == pytest.approx(5 * 5.5) and balanced < now


def test_recognize_orders() -> None:
    """GIVEN each stage's pass letters as GPipe and 1F1B run them THEN the schedule is named; else unknown."""
    for p, m in ((2, 4), (4, 8)):
        for s in range(p - 1):  # the last stage's 1F1B and GPipe orders differ only in warm-up, checked below
            assert recognize("".join(k for k, _ in pass_order("1f1b", s, p, m)), s, p) == "1f1b"
            assert recognize("".join(k for k, _ in pass_order("gpipe", s, p, m)), s, p) == "gpipe"
    assert recognize("FBFBFBFB", 1, 2) == "1f1b" and recognize("FFFFBBBB", 1, 2) == "gpipe"
    assert recognize("FFB", 0, 2) == "unknown" and recognize("", 0, 2) == "unknown"


def test_middle_stage_passes_need_the_peer() -> None:
    """GIVEN the sends/receives of the middle stage of a 3-stage 1F1B pipeline (a pure pipeline job: its one
    pipeline group is the world) WHEN read into pass letters
    THEN with each op's peer the letters are the stage's 1F1B order; without peers they cannot be told."""
    from perftracker.analyzers.layout.infer import infer_layout
    from perftracker.analyzers.pipeline.views import pass_letters
    from perftracker.store.run_info import ProcessGroup

    layout = infer_layout({"1": ProcessGroup("1", "PIPELINE_MODEL_PARALLEL_GROUP", 3, (0, 1, 2), "test")}, 3)
    assert layout.stages == 3 and layout.stage_of(1) == 1
    ops = []
    for kind, _ in pass_order("1f1b", 1, 3, 4):
        ops += [("recv", 0), ("send", 2)] if kind == "F" else [("recv", 2), ("send", 0)]
    frame = pd.DataFrame(ops, columns=["op", "peer"])
    letters = pass_letters(frame, 1, 3, layout)
    assert letters == "FFBFBFBB" and recognize(letters, 1, 3) == "1f1b"
    assert pass_letters(frame.assign(peer=-1), 1, 3, layout) == ""


def _rows(bubble: float, steps: int = 4) -> pd.DataFrame:
    return pd.DataFrame([{"step": s, "stage": st, "replica": r, "rank": 2 * st + r, "step_ms": 100.0,
                          "phase_ms": 80.0, "recv_wait_ms": 80.0 * bubble}
                         for s in range(steps) for st in range(2) for r in range(2)])


def test_bubbles_beyond_the_ideal() -> None:
    """GIVEN 2 stages, 4 micro-batches (ideal bubble 20%) and every worker blocked in receives 60% of the pipeline
    phase in every step WHEN the bubble rule runs
    THEN one warning: 40 points beyond the ideal (32 ms of an 80 ms phase), and the micro-batches that would bring
    the bubble back to 20%: k = b m / ((1 - b)(p - 1)) = 6, so 6 x 4 = 24. At 30% (10 points over) nothing.
    (Exact rows: no recorded job has bubbles beyond the ideal without a heavy stage or a slow worker.)"""
    from perftracker.analyzers.pipeline.analyzer import bubble_findings

    rows = _rows(0.6)
    [finding] = bubble_findings(rows, rows["recv_wait_ms"] / rows["phase_ms"], 0.2, 2, 4, "1f1b")
    assert finding.severity.label == "warning" and finding.evidence["microbatches_to_hide"] == 24
    assert finding.cost.seconds_per_step == pytest.approx(0.032)
    quiet = _rows(0.3)
    assert bubble_findings(quiet, quiet["recv_wait_ms"] / quiet["phase_ms"], 0.2, 2, 4, "1f1b") == []
