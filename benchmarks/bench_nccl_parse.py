"""Parse speed of the NCCL log parser on a generated log of realistic mixed lines.

Writes a log of `--size-mb` MB (default 1024) into a temporary folder: NCCL_DEBUG=INFO lines of
64 processes on 8 hosts (Channel / Ring / Trees / Init / env echo / NET lines, some with mpirun
prefixes), WARN records and unrelated application output; parses it on one core; prints MB/s;
removes the file. Target: >= 50 MB/s.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from perftracker.collectors.nccl.log import load_nccl_logs


def _block(rng: random.Random, n: int) -> str:
    lines = []
    for _ in range(n):
        host = f"gpu-node-{rng.randrange(8):03d}"
        pid = 10000 + rng.randrange(64)
        tid = pid + rng.randrange(40)
        dev = rng.randrange(8)
        head = f"{host}:{pid}:{tid} [{dev}] NCCL INFO "
        prefix = f"[1,{rng.randrange(64)}]<stdout>:" if rng.random() < 0.2 else ""
        r = rng.random()
        ch = rng.randrange(32)
        if r < 0.45:
            msg = (f"Channel {ch:02d}/1 : {rng.randrange(64)}[{dev}] -> {rng.randrange(64)}[{rng.randrange(8)}] "
                   f"[send] via NET/IB/{rng.randrange(8)}/GDRDMA")
        elif r < 0.6:
            msg = f"Channel {ch:02d}/0 : {rng.randrange(64)}[{dev}] -> {rng.randrange(64)}[{dev}] via P2P/CUMEM/read"
        elif r < 0.65:
            msg = f"Ring {ch:02d} : {rng.randrange(64)} -> {rng.randrange(64)} -> {rng.randrange(64)}"
        elif r < 0.68:
            msg = f"Trees [{ch}] {rng.randrange(64)}/-1/-1->{rng.randrange(64)}->{rng.randrange(64)}"
        elif r < 0.7:
            msg = rng.choice(["NCCL_IB_TC set by environment to 136.", "NCCL_IB_TIMEOUT set by environment to 22.",
                              "NCCL_IB_GID_INDEX set by environment to 3."])
        elif r < 0.72:
            msg = ("NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]mlx5_2:1/RoCE [3]mlx5_3:1/RoCE [RO]; "
                   "OOB eth0:10.0.0.1<0>")
        elif r < 0.74:
            msg = (f"ncclCommInitRank comm 0x7f{rng.randrange(1 << 24):06x} rank {rng.randrange(64)} nranks 64 "
                   f"cudaDev {dev} nvmlDev {dev} busId 1b000 commId 0x49bbd7790311d5eb - Init COMPLETE")
        elif r < 0.76:
            msg = f"[Proxy Progress] Device {dev} CPU core {rng.randrange(96)}"
        elif r < 0.77:
            lines.append(f"\n{host}:{pid}:{tid} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
                         f"from peer 10.0.0.{rng.randrange(250)}<{rng.randrange(65536)}> with status=12 opcode=0 "
                         "len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2")
            continue
        else:
            lines.append(f"{prefix}step {rng.randrange(100000)} loss {rng.random():.4f} lr 3e-4 "
                         f"throughput {rng.random() * 1000:.1f} samples/s")
            continue
        lines.append(prefix + head + msg)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=float, default=1024.0)
    args = parser.parse_args()
    rng = random.Random(7)
    blocks = [_block(rng, 20000) for _ in range(8)]
    target = int(args.size_mb * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="perftracker-bench-") as tmp:
        path = Path(tmp) / "job.log"
        written = 0
        with open(path, "w", encoding="utf-8") as handle:
            i = 0
            while written < target:
                data = blocks[i % len(blocks)]
                handle.write(data)
                written += len(data.encode())
                i += 1
        size_mb = path.stat().st_size / (1024 * 1024)
        start = time.perf_counter()
        cpu0 = time.process_time()
        frames, notes = load_nccl_logs([path])
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        rows = len(frames["nccl"])
    print(f"parsed {size_mb:.1f} MB in {elapsed:.2f} s: {size_mb / elapsed:.1f} MB/s wall, "
          f"{size_mb / cpu:.1f} MB/s of CPU time "
          f"({rows} fact rows, {len(notes)} notes; target >= 50 MB/s)")


if __name__ == "__main__":
    main()
