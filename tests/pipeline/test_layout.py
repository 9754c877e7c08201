"""The layout (TP/CP/EP/DP/PP) inferred from process groups: real pipeline traces and exact synthetic group tables.

Synthetic group tables here are exact ground truth: Megatron-core's rank order tp-cp-ep-dp-pp with its group names,
and torch DeviceMesh's "mesh_<dim>" names as torchtitan builds its mesh (pp, dp_replicate, dp_shard, tp).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.layout.infer import dim_of_desc, infer_layout
from perftracker.analyzers.layout.views import with_positions
from perftracker.store.run_info import ProcessGroup

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pipeline_gloo"


def _table(groups: list[tuple[str, tuple[int, ...]]]) -> dict[str, ProcessGroup]:
    return {str(i): ProcessGroup(str(i), desc, len(ranks), ranks, "test") for i, (desc, ranks) in enumerate(groups)}


def _megatron(tp: int, pp: int, dp: int) -> dict[str, ProcessGroup]:
    """Megatron's groups for order tp-cp-ep-dp-pp: rank = t + tp * (d + dp * p)."""
    def rank(t: int, d: int, p: int) -> int:
        return t + tp * (d + dp * p)
    groups: list[tuple[str, tuple[int, ...]]] = [("default_pg", tuple(range(tp * pp * dp)))]
    groups += [("TENSOR_MODEL_PARALLEL_GROUP", tuple(rank(t, d, p) for t in range(tp)))
               for p in range(pp) for d in range(dp)]
    groups += [("DATA_PARALLEL_GROUP", tuple(rank(t, d, p) for d in range(dp))) for p in range(pp) for t in range(tp)]
    groups += [("PIPELINE_MODEL_PARALLEL_GROUP", tuple(rank(t, d, p) for p in range(pp)))
               for d in range(dp) for t in range(tp)]
    groups += [("MODEL_PARALLEL_GROUP", tuple(rank(t, d, p) for p in range(pp) for t in range(tp))) for d in range(dp)]
    groups += [("EMBEDDING_GROUP", (rank(0, d, 0), rank(0, d, pp - 1))) for d in range(dp)]
    return _table(groups)


def test_real_pipeline_job_layout() -> None:
    """GIVEN the traces of the real 2-stage x 2-replica gloo job (Megatron order, TP=1)
    WHEN its layout is inferred from the groups its traces list
    THEN DP groups are {0,1} and {2,3}, pipelines {0,2} and {1,3}, named from pg_desc, and each rank's place reads
    'rank r: stage s, replica d'."""
    from perftracker import api

    store = api.load(FIXTURES / "gpipe" / "traces", cache=False)
    layout = infer_layout(store.run_info.process_groups, 4)
    dp, pp = layout.dim("dp"), layout.dim("pp")
    assert dp is not None and pp is not None
    assert set(dp.groups) == {(0, 1), (2, 3)}
    assert set(pp.groups) == {(0, 2), (1, 3)}
    assert layout.confidence >= 0.9 and "pg_desc" in layout.method
    assert [layout.where(r) for r in range(4)] == ["rank 0: stage 0, replica 0", "rank 1: stage 0, replica 1",
                                                   "rank 2: stage 1, replica 0", "rank 3: stage 1, replica 1"]
    assert layout.pipeline_neighbours(1) == (None, 3) and layout.peers(1, "dp") == (0,)


@pytest.mark.parametrize(("tp", "pp", "dp"), [(2, 2, 2), (4, 2, 2), (2, 4, 1)])
def test_megatron_tensor_pipeline_data_layout(tp: int, pp: int, dp: int) -> None:
    """GIVEN Megatron's group table of a TP x PP x DP job (with its composite model-parallel and embedding groups)
    WHEN the layout is inferred
    THEN each rank's coordinates are exactly Megatron's: rank = t + tp * (d + dp * p)."""
    layout = infer_layout(_megatron(tp, pp, dp), tp * pp * dp)
    assert layout.size("tp") == tp and layout.size("pp") == pp and layout.size("dp") == dp
    for t in range(tp):
        for d in range(dp):
            for p in range(pp):
                r = t + tp * (d + dp * p)
                coords = layout.coords[r]
                assert (coords.get("tp", 0), coords.get("dp", 0), coords.get("pp", 0)) == (t, d, p)
    assert layout.confidence >= 0.9 and layout.note == ""
    assert layout.where(tp * pp * dp - 1).startswith(f"rank {tp * pp * dp - 1}: stage {pp - 1}")


def test_torchtitan_mesh_layout() -> None:
    """GIVEN torchtitan's DeviceMesh groups for mesh (pp=2, dp_replicate=2, dp_shard=2, tp=2), row-major
    WHEN the layout is inferred
    THEN tp and pp are found, and dp_replicate x dp_shard merge into one data-parallel dimension of 4."""
    names = ("pp", "dp_replicate", "dp_shard", "tp")
    mesh = np.arange(16).reshape(2, 2, 2, 2)  # init_device_mesh's row-major layout
    groups = [(f"mesh_{name}", tuple(int(r) for r in row))
              for axis, name in enumerate(names) for row in np.moveaxis(mesh, axis, -1).reshape(-1, 2)]
    layout = infer_layout(_table(groups), 16)
    assert layout.size("tp") == 2 and layout.size("pp") == 2 and layout.size("dp") == 4
    assert layout.stage_of(8) == 1 and layout.stage_of(7) == 0
    assert layout.coords[1]["tp"] == 1


def test_unnamed_groups_with_send_recv_neighbours() -> None:
    """GIVEN groups without names and the send/recv pairs of a 2 x 2 pipeline job
    WHEN the layout is inferred
    THEN the family holding the pairs is the pipeline, the other the replicas, with a lower confidence and a note."""
    table = _table([("", (0, 1)), ("", (2, 3)), ("", (0, 2)), ("", (1, 3))])
    layout = infer_layout(table, 4, {(0, 2), (1, 3)})
    assert layout.dim("pp") is not None and set(layout.dim("pp").groups) == {(0, 2), (1, 3)}  # type: ignore[union-attr]
    assert layout.confidence < 0.9 and "named without" in layout.note


def test_no_groups_no_layout() -> None:
    """GIVEN no groups and no send/recv pairs WHEN the layout is inferred THEN it is empty and says why."""
    layout = infer_layout({}, 4)
    assert not layout.known and "not inferred" in layout.note and layout.where(2) == "rank 2"


def test_desc_names() -> None:
    """GIVEN group descriptions of Megatron, torchtitan and composite groups THEN each names its one dimension or none."""
    assert [dim_of_desc(d) for d in ("TENSOR_MODEL_PARALLEL_GROUP", "mesh_pp", "mesh_dp_shard", "CONTEXT_PARALLEL_GROUP",
                                     "EXPERT_MODEL_PARALLEL_GROUP")] == ["tp", "pp", "dp", "cp", "ep"]
    assert [dim_of_desc(d) for d in ("MODEL_PARALLEL_GROUP", "TENSOR_AND_DATA_PARALLEL_GROUP", "default_pg",
                                     "mesh_dp_shard_cp", "undefined")] == [None] * 5


def test_positions_post_pass() -> None:
    """GIVEN findings naming one rank, two ranks and none, and a known layout
    WHEN the positions post-pass runs THEN each finding naming ranks carries where they sit; the others are unchanged."""
    layout = infer_layout(_megatron(1, 2, 2), 4)
    one = Finding("x", Severity.WARNING, "t", "r", ranks=(1,))
    two = Finding("x", Severity.INFO, "t", "r", ranks=(2, 3))
    none = Finding("x", Severity.INFO, "t", "r")
    out = with_positions([one, two, none], layout)
    assert out[0].evidence["position"] == "rank 1: stage 0, replica 1"
    assert out[1].evidence["positions"] == ["rank 2: stage 1, replica 0", "rank 3: stage 1, replica 1"]
    assert out[2] == none
