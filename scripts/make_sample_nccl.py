"""Write sample_traces/nccl-roce-2node-misconfig: NCCL inputs for the demo's configuration analysis.

This machine has no GPU, NCCL or RDMA device, so no real NCCL log can be produced here. The folder
holds the project's own NCCL_DEBUG=INFO log excerpt (tests/fixtures/nccl/mixed_job.log: a 2-node RoCE
job's output with launcher prefixes) and per-rank environment snapshots with the mistakes users make
(an octal-looking NCCL_IB_TC, a bare HCA prefix, a docker bridge as socket interface on one node,
a low IB timeout). It is labelled as written, not collected, in sample_traces/README.md and in its
manifest (`synthetic`: every input, which perftracker shows in the report, the terminal and findings.json).

`counters/<host>.rdma.jsonl` are synthetic RoCE port samples (5 s for 60 s) of each node's mlx5_1
(netdev eth1) in the live sampler's format, with the `ethtool` flow-control counters taken from the
project's mlx5 `ethtool -S` fixture (tests/fixtures/health/node-r.mlx5-roce.ethtool-S.txt): nodeB's
port is paused by the switch on priority 3 for 18% of the time (rx_prio3_pause_duration), no ECN marks
or CNPs anywhere; nodeA's flow-control counters stay flat. Expected: one rdma_pfc warning on nodeB.

    python scripts/make_sample_nccl.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from perftracker.collectors.counters.ethtool import flow_control, parse_ethtool_stats

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_traces" / "nccl-roce-2node-misconfig"

COMMON = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_1", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "0136",
          "NCCL_IB_TIMEOUT": "12", "NCCL_IB_QPS_PER_CONNECTION": "1", "WORLD_SIZE": "4", "MASTER_PORT": "29500"}
PER_RANK = {0: ("nodeA", 1001, {"NCCL_SOCKET_IFNAME": "eth0"}), 1: ("nodeA", 1002, {"NCCL_SOCKET_IFNAME": "eth0"}),
            2: ("nodeB", 2001, {"NCCL_SOCKET_IFNAME": "docker0"}), 3: ("nodeB", 2002, {"NCCL_SOCKET_IFNAME": "docker0"})}


# What the manifest says is made up (perftracker shows it in the report, the terminal and findings.json).
SYNTHETIC = [
    {"path": ".", "made_by": "scripts/make_sample_nccl.py",
     "what": "a sample written for the demo and the tests; no NCCL job ran on this machine"},
    {"path": "output/job.log", "made_by": "the project (tests/fixtures/nccl/mixed_job.log)",
     "what": "the project's NCCL_DEBUG=INFO excerpt of a 2-node RoCE job, written, not collected"},
    {"path": "env/", "made_by": "scripts/make_sample_nccl.py",
     "what": "per-rank environment snapshots with planted NCCL configuration mistakes"},
    {"path": "counters/", "made_by": "scripts/make_sample_nccl.py",
     "what": "RoCE port samples; nodeB's mlx5_1 paused by PFC on priority 3 18% of the time"},
]

T0_S = 1772359170  # 2026-03-01 09:59:30 UTC, just before the NCCL log excerpt's WARN lines
STEP_S, SAMPLES = 5, 13
GBPS = {"nodeA": 120.0, "nodeB": 95.0}
PAUSED_SHARE = {"nodeA": 0.0, "nodeB": 0.18}


def rdma_records(host: str) -> list[dict[str, Any]]:
    """Synthetic samples of the host's RoCE port mlx5_1 / eth1, as the live RDMA sampler writes them."""
    fixture = ROOT / "tests" / "fixtures" / "health" / "node-r.mlx5-roce.ethtool-S.txt"
    eth = flow_control(parse_ethtool_stats(fixture.read_text()))
    words = int(GBPS[host] * 1e9 / 8 / 4 * STEP_S)
    recs = []
    for i in range(SAMPLES):
        paused_us = int(PAUSED_SHARE[host] * STEP_S * 1e6) * i
        ethtool = {**eth, "rx_prio3_pause": eth["rx_prio3_pause"] + paused_us // 250,
                   "rx_prio3_pause_transition": eth["rx_prio3_pause_transition"] + paused_us // 500,
                   "rx_prio3_pause_duration": eth["rx_prio3_pause_duration"] + paused_us}
        counters = {"port_xmit_data": 9_000_000_000 + words * i, "port_rcv_data": 9_100_000_000 + words * i,
                    "port_xmit_packets": 2_000_000 + words * i // 1024, "port_rcv_packets": 2_100_000 + words * i // 1024,
                    "port_xmit_discards": 0, "port_rcv_errors": 0, "symbol_error": 0, "link_downed": 0,
                    "link_error_recovery": 0, "port_xmit_wait": 0}
        hw = {"np_cnp_sent": 0, "rp_cnp_handled": 0, "np_ecn_marked_roce_packets": 0, "out_of_sequence": 0,
              "out_of_buffer": 0, "local_ack_timeout_err": 0, "packet_seq_err": 0, "rx_write_requests": 4_000_000 + 900 * i}
        recs.append({"ts_ns": (T0_S + STEP_S * i) * 10**9, "host": host, "device": "mlx5_1", "port": "1",
                     "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)",
                     "link_layer": "Ethernet", "counters": counters, "hw_counters": hw, "numa_node": 0,
                     "pci_bus_id": "0000:1b:00.1", "netdevs": ["eth1"], "ethtool": ethtool})
    return recs


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "output").mkdir(parents=True)
    shutil.copyfile(ROOT / "tests" / "fixtures" / "nccl" / "mixed_job.log", OUT / "output" / "job.log")
    for rank, (host, pid, extra) in PER_RANK.items():
        env = {**COMMON, **extra, "RANK": str(rank), "LOCAL_RANK": str(rank % 2)}
        record = {"rank": rank, "host": host, "pid": pid, "env": env}
        path = OUT / "env" / f"rank-{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    for host in ("nodeA", "nodeB"):
        path = OUT / "counters" / f"{host}.rdma.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rdma_records(host)))
    manifest = {"format": "perftracker-run", "format_version": 1, "job": "2-node RoCE job (project-written sample)",
                "created_by": "scripts/make_sample_nccl.py", "hosts": ["nodeA", "nodeB"], "ranks": [0, 1, 2, 3],
                "synthetic": SYNTHETIC}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
