"""End to end: a communication straggler found in traces, joined to the flapping NIC of its host."""

from __future__ import annotations

import json
from pathlib import Path

from api_helpers import analyzed
from synth import SynthSpec, generate, tp_dp_groups

from perftracker.collectors.loading import LoadOptions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "health"


def test_communication_straggler_chain_from_traces_to_the_nic(tmp_path: Path) -> None:
    # GIVEN a 16-rank TP x DP job whose rank 11 transfers slowly (synthetic traces, exact ground truth),
    run = tmp_path / "run"
    generate(SynthSpec(ranks=16, groups=tp_dp_groups(16, 2), comm_stragglers={11: 1500.0}, seed=4), run / "traces",
             truth_path=tmp_path / "truth.json")
    # env snapshots placing two ranks per host (rank 11 on node-c, NIC mlx5_1),
    for rank in range(16):
        host = "node-c" if rank in (10, 11) else f"node-{rank // 2}"
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank % 2), "NCCL_IB_HCA": f"mlx5_{rank % 2}"}
        (run / "env").mkdir(exist_ok=True)
        (run / "env" / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "host": host, "pid": 100 + rank,
                                                                   "env": env}))
    # and node-exporter samples of node-c where mlx5_1 flaps, scraped while the traced steps ran
    (run / "counters").mkdir()
    from perftracker.collectors.loading import load_path

    traced = load_path(run / "traces", LoadOptions(workers=1, cache_dir=None))
    start_s = (int(traced.ranks["base_ns"].min()) + int(traced.events["start_ns"].min())) // 10**9
    prom = (FIXTURES / "node-c.node_exporter.prom").read_text()
    for i in range(6):  # the fixture's six scrapes, 15 s apart, now starting 30 s before the traced steps
        prom = prom.replace(f"# scrape_time {1795000000 + 15 * i}", f"# scrape_time {start_s - 30 + 15 * i}")
    (run / "counters" / "node-c.node_exporter.prom").write_text(prom)
    # WHEN the run is analyzed
    result = analyzed(run, tmp_path / "out", cache=False, workers=1)
    # THEN rank 11 is the communication straggler and the flapping mlx5_1 on node-c is its root cause
    straggler = next(f for f in result.findings if f.analyzer == "straggler" and f.ranks == (11,))
    assert straggler.evidence["kind"] == "communication"
    chain = straggler.evidence.get("root_cause", {}).get("chain", [])
    flap = [f for f in result.findings if f.evidence.get("check") == "flap"]
    assert flap and flap[0].evidence["device"] == "mlx5_1"
    assert [c["id"] for c in chain] == [flap[0].id] and chain[0]["explains"]
