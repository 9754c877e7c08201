"""Write sample_traces/nccl-roce-2node-misconfig: NCCL inputs for the demo's configuration analysis.

This machine has no GPU, NCCL or RDMA device, so no real NCCL log can be produced here. The folder
holds the project's own NCCL_DEBUG=INFO log excerpt (tests/fixtures/nccl/mixed_job.log: a 2-node RoCE
job's output with launcher prefixes) and per-rank environment snapshots with the mistakes users make
(an octal-looking NCCL_IB_TC, a bare HCA prefix, a docker bridge as socket interface on one node,
a low IB timeout). It is labelled as written, not collected, in sample_traces/README.md.

    python scripts/make_sample_nccl.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_traces" / "nccl-roce-2node-misconfig"

COMMON = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_1", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "0136",
          "NCCL_IB_TIMEOUT": "12", "NCCL_IB_QPS_PER_CONNECTION": "1", "WORLD_SIZE": "4", "MASTER_PORT": "29500"}
PER_RANK = {0: ("nodeA", 1001, {"NCCL_SOCKET_IFNAME": "eth0"}), 1: ("nodeA", 1002, {"NCCL_SOCKET_IFNAME": "eth0"}),
            2: ("nodeB", 2001, {"NCCL_SOCKET_IFNAME": "docker0"}), 3: ("nodeB", 2002, {"NCCL_SOCKET_IFNAME": "docker0"})}


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
    manifest = {"format": "perftracker-run", "format_version": 1, "job": "2-node RoCE job (project-written sample)",
                "created_by": "scripts/make_sample_nccl.py", "hosts": ["nodeA", "nodeB"], "ranks": [0, 1, 2, 3]}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
