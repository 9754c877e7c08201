"""A small 8-rank gloo job with three process-group kinds and one injected fault, for flight-recorder dumps.

Run under torchrun (`scripts/record_fr_faults.py` does): ranks = pp * 4 + dp * 2 + tp over tensor (tp, 2
ranks), data (dp, 2) and pipeline (pp, 2) groups. Each step: an all_reduce in the tensor group, a send
from the first pipeline stage to the second (recv there), an all_reduce in the data group, and every
second step a barrier-like all_reduce on the default group. At `--fault-step`, `--fault-rank` does
`--fault`: `raise` (a RuntimeError), `gil` (sleeps 600 s inside a C call that holds the GIL: ctypes.PyDLL),
or `kill` (SIGKILL to itself). Each rank serves its flight recorder on a unix socket
(`$FR_DIR/ws.<rank>.sock`, torch's control-plane worker server, answered from C++ even while the main
thread is blocked), and on an exception dumps its own flight recorder to `$FR_DIR/rank_<rank>` (pickle,
`_dump_fr_trace`, the file `TORCH_FR_DUMP_TEMP_FILE` names) before it exits, so that ranks that fail
because a peer vanished leave their state too.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.control_plane import worker_main


def groups(rank: int) -> dict[str, dist.ProcessGroup]:
    """Every rank creates every group in the same order; returns the three this rank belongs to."""
    mine: dict[str, dist.ProcessGroup] = {}
    tp_of, dp_of, pp_of = rank % 2, (rank // 2) % 2, rank // 4
    for kind, members in (
        ("tp", [[p * 4 + d * 2 + t for t in range(2)] for p in range(2) for d in range(2)]),
        ("dp", [[p * 4 + d * 2 + t for d in range(2)] for p in range(2) for t in range(2)]),
        ("pp", [[p * 4 + d * 2 + t for p in range(2)] for d in range(2) for t in range(2)]),
    ):
        for ranks in members:
            group = dist.new_group(ranks, group_desc=f"{kind.upper()}_GROUP")
            if rank in ranks:
                mine[kind] = group
    del tp_of, dp_of, pp_of
    return mine


def fault(kind: str) -> None:
    if kind == "raise":
        raise RuntimeError("fr_fault_job: injected failure")
    if kind == "gil":
        ctypes.PyDLL(None).sleep(600)  # PyDLL keeps the GIL held across the call
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--fault", choices=["raise", "gil", "kill", "none"], default="none")
    parser.add_argument("--fault-rank", type=int, default=5)
    parser.add_argument("--fault-step", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    out = Path(os.environ["FR_DIR"])
    os.environ["TORCH_WORKER_SERVER_SOCKET"] = str(out / f"ws.{rank}.sock")
    (out / f"pid.{rank}").write_text(str(os.getpid()))
    with worker_main():
        dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
        mine = groups(rank)
        x = torch.ones(1024)
        try:
            for step in range(args.steps):
                if step == args.fault_step and rank == args.fault_rank:
                    fault(args.fault)
                dist.all_reduce(x, group=mine["tp"])
                peer = rank + 4 if rank < 4 else rank - 4
                if rank < 4:
                    dist.send(x, peer, group=mine["pp"])
                else:
                    dist.recv(x, peer, group=mine["pp"])
                dist.all_reduce(x, group=mine["dp"])
                if step % 2 == 1:
                    dist.all_reduce(torch.ones(8))
                x /= 8
                print(f"rank {rank} step {step} done", flush=True)
        except Exception:
            traceback.print_exc()
            dump = torch._C._distributed_c10d._dump_fr_trace(True, False, False)
            (out / f"rank_{rank}").write_bytes(dump)
            sys.stderr.flush()
            time.sleep(float(os.environ.get("FR_LINGER_S", "0")))
            raise
        dist.destroy_process_group()


if __name__ == "__main__":
    from job_exit import end_job  # (scripts/, beside this file)

    main()
    end_job(0)
