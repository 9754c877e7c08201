"""Regenerate tests/fixtures/inspector/: NCCL Inspector output files built from the documented format.

No GPU run recorded these: each line is what NCCL's Inspector plugin writes (one compact JSON object per
completed collective and communicator, `plugins/profiler/inspector/inspector_json.cc`; field meanings in
perftracker/collectors/nccl/inspector.py), with times from a small model of a data-parallel job:

* 8 ranks on 2 hosts (node-a: ranks 0-3, node-b: ranks 4-7), one process each (file
  `<host>-pid<pid>.log`), 24 steps. Per step: compute, an AllGather of 16 MiB on the rank's host
  communicator (4 ranks), compute, an AllReduce of 64 MiB on the world communicator (8 ranks).
* A rank's kernel starts when it arrives (calls the collective) and every kernel of a collective ends
  together, a transfer time after the last rank arrived; so a rank's `coll_exec_time_us` is that end
  minus its own arrival, and algbw / busbw follow from it by NCCL's formulas (`inspectorComputeOpBw`).
* Cases: `clean/` (compute jitter only), `straggler/` (rank 5 computes 1.5 ms longer before each collective,
  so it arrives last at both), `bandwidth_drop/` (the world AllReduce's transfer takes 45% longer
  from step 12 on, as when a link falls back to a lower rate).

    python scripts/make_inspector_fixtures.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "inspector"
RANKS, PER_HOST, STEPS = 8, 4, 24
WORLD_ID, HOST_IDS = "0x7f8c496ae9f661", ("0x3a91c2d4e5f601", "0x3a91c2d4e5f602")
T0_US = 1_764_600_000_000_000  # 2025-12-01, epoch us
ALLGATHER_BYTES, ALLREDUCE_BYTES = 16 << 20, 64 << 20
ALLGATHER_US, ALLREDUCE_US = 900.0, 2600.0
COMPUTE_US, JITTER_US = 40_000.0, 150.0


def _bw(op: str, size: int, n: int, exec_us: int) -> tuple[float, float]:
    """NCCL's algbw / busbw (GB/s), inspector.cc `inspectorComputeOpBw`."""
    seconds = exec_us / 1e6
    traffic = size * n if op in ("AllGather", "ReduceScatter") else size
    factor = 2 * (n - 1) / n if op == "AllReduce" else (n - 1) / n
    algbw = traffic / 1e9 / seconds if seconds else 0.0
    return algbw, algbw * factor


def _line(host: str, pid: int, comm: str, name: str, rank: int, n: int, nnodes: int, op: str, seq: int, size: int,
          exec_us: int, dump_us: int) -> str:
    algbw, busbw = _bw(op, size, n, exec_us)
    record = {"header": {"id": comm, "comm_name": name, "rank": rank, "n_ranks": n, "nnodes": nnodes},
              "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism":
                           "nccl_profiler_interface", "dump_timestamp_us": dump_us, "hostname": host, "pid": pid},
              "coll_perf": {"coll": op, "coll_sn": seq, "coll_msg_size_bytes": size, "coll_exec_time_us": exec_us,
                            "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": round(algbw, 6),
                            "coll_busbw_gbs": round(busbw, 6)}}
    return json.dumps(record, separators=(",", ":"))


def _collective(rng: np.random.RandomState, arrive: np.ndarray, transfer_us: float) -> tuple[np.ndarray, float]:
    """Each member's exec time (us) and the common end time, for members arriving at `arrive`."""
    end = float(arrive.max()) + transfer_us * (1.0 + 0.01 * rng.randn())
    return np.maximum(1, np.round(end - arrive)).astype(int), end


def make_case(name: str, slow_rank: int | None = None, drop_from: int | None = None, seed: int = 7) -> None:
    rng = np.random.RandomState(seed)
    lines: dict[int, list[str]] = {r: [] for r in range(RANKS)}
    host = [f"node-{'ab'[r // PER_HOST]}" for r in range(RANKS)]
    now = np.full(RANKS, float(T0_US))
    for step in range(STEPS):
        extra = np.array([1500.0 if r == slow_rank else 0.0 for r in range(RANKS)])  # before each collective
        arrive = now + COMPUTE_US / 2 + extra + JITTER_US * rng.randn(RANKS)
        for h in range(RANKS // PER_HOST):
            members = np.arange(h * PER_HOST, (h + 1) * PER_HOST)
            execs, end = _collective(rng, arrive[members], ALLGATHER_US)
            for i, r in enumerate(int(m) for m in members):
                lines[r].append(_line(host[r], 4100 + r, HOST_IDS[h], f"tp-{host[r]}", i, PER_HOST, 1, "AllGather",
                                      step, ALLGATHER_BYTES, int(execs[i]), int(end // 100_000 + 1) * 100_000))
            now[members] = end
        arrive = now + COMPUTE_US / 2 + extra + JITTER_US * rng.randn(RANKS)
        transfer = ALLREDUCE_US * (1.45 if drop_from is not None and step >= drop_from else 1.0)
        execs, end = _collective(rng, arrive, transfer)
        for r in range(RANKS):
            lines[r].append(_line(host[r], 4100 + r, WORLD_ID, "default_pg", r, RANKS, 2, "AllReduce", step,
                                  ALLREDUCE_BYTES, int(execs[r]), int(end // 100_000 + 1) * 100_000))
        now[:] = end
    folder = OUT / name
    folder.mkdir(parents=True)
    for r in range(RANKS):
        (folder / f"{host[r]}-pid{4100 + r}.log").write_text("\n".join(lines[r]) + "\n", encoding="utf-8")


def main() -> None:
    readme = OUT / "README.md"
    kept = readme.read_text(encoding="utf-8") if readme.exists() else None
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    if kept is not None:
        readme.write_text(kept, encoding="utf-8")
    make_case("clean")
    make_case("straggler", slow_rank=5)
    make_case("bandwidth_drop", drop_from=12)


if __name__ == "__main__":
    main()
