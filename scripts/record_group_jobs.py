"""Record real 4-rank gloo jobs whose collectives run inside process groups, as test fixtures.

Promise: ``python scripts/record_group_jobs.py OUT [--case CASE ...]`` runs one short torchrun job (CPU, gloo,
4 ranks, ``torch.profiler`` with ``record_shapes=True``) per case and writes its Kineto traces, gzipped, to
``OUT/<case>/rank-<r>.pt.trace.json.gz`` with a ``job.md`` saying what the job did (the ground truth the tests
read). Cases:

* ``tp_dp``: a tensor-parallel-like layout. Tensor-parallel groups {0,1} and {2,3} all-reduce an activation
  after every layer (3 layers), data-parallel groups {0,2} and {1,3} all-reduce the gradients once per step,
  and the world group all-reduces the loss (a scalar): three kinds of group, every rank in one of each.
* ``tp_dp_slow``: the same, with rank 1 doing 4x the layer compute (real matrix products, not sleeps): its
  tensor-parallel partner 0 waits for it every layer, ranks 2 and 3 do not.
* ``p2p``: pipeline-like point-to-point traffic: ranks 0 and 1 ``isend`` an activation to ranks 2 and 3
  (their "next stage"), which ``irecv`` it and reply with a ``send`` of a gradient to their ``recv``; rank 0's
  send goes through the group {0,2} (a group rank, not the global one); then one all_reduce per "stage"
  over {0,1} and {2,3}.
* ``alltoall``: expert-parallel-like token exchange: ``all_to_all_single`` over the world with uneven splits,
  rank 1 receiving most tokens (it hosts the popular expert), then some compute proportional to the tokens
  received, every step.

Exit 0 when every case was written, 1 otherwise (said on stderr). A case takes ~10 s on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from job_exit import end_job  # (scripts/, beside this file)

CASES = ("tp_dp", "tp_dp_slow", "p2p", "alltoall")
STEPS = 4
LAYERS = 3
WIDTH = 256
# alltoall: how many rows rank j sends to rank i (SPLITS[j][i]); rank 1 hosts the popular expert.
SPLITS = [[8, 40, 8, 8], [8, 40, 8, 8], [6, 44, 8, 6], [8, 40, 6, 10]]


def worker(case: str, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    weight = torch.randn(WIDTH, WIDTH) / WIDTH ** 0.5
    x = torch.randn(64, WIDTH)
    grads = torch.randn(4 * WIDTH * WIDTH // 4)
    extra = 4 if case == "tp_dp_slow" and rank == 1 else 1
    sched = schedule(wait=1, warmup=1, active=STEPS)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched) as prof:
        for _ in range(STEPS + 2):
            if case.startswith("tp_dp"):
                h = x
                for layer in range(LAYERS):
                    with record_function(f"layer{layer}"):
                        for _ in range(extra):
                            h = torch.tanh(h @ weight)
                    dist.all_reduce(h, group=tp)
                dist.all_reduce(grads, group=dp)
                loss = h.sum().reshape(1)
                dist.all_reduce(loss)
            elif case == "p2p":
                act = torch.tanh(x @ weight)
                if rank < 2:
                    via = dp_groups[0] if rank == 0 else None
                    req = dist.isend(act, rank + 2, group=via)
                    req.wait()
                    grad = torch.empty_like(act)
                    dist.recv(grad, rank + 2)
                    dist.all_reduce(grad[:8].contiguous(), group=tp)
                else:
                    got = torch.empty_like(act)
                    via = dp_groups[0] if rank == 2 else None
                    dist.irecv(got, rank - 2, group=via).wait()
                    back = torch.tanh(got @ weight)
                    dist.send(back, rank - 2)
                    dist.all_reduce(back[:16].contiguous(), group=tp)
            else:  # alltoall
                send_splits = SPLITS[rank]
                recv_splits = [SPLITS[j][rank] for j in range(world)]
                tokens = torch.randn(sum(send_splits), WIDTH)
                received = torch.empty(sum(recv_splits), WIDTH)
                dist.all_to_all_single(received, tokens, output_split_sizes=recv_splits,
                                       input_split_sizes=send_splits)
                with record_function("expert"):
                    for _ in range(4):
                        received = torch.tanh(received @ weight)
                dist.all_reduce(received.sum().reshape(1))
            prof.step()
    raw = out / f"rank-{rank}.pt.trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    dist.barrier()
    dist.destroy_process_group()


TRUTH = {
    "tp_dp": {"groups": {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]], "world": [[0, 1, 2, 3]]},
              "per_step": {"tp": LAYERS, "dp": 1, "world": 1}, "slow_rank": None},
    "tp_dp_slow": {"groups": {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]], "world": [[0, 1, 2, 3]]},
                   "per_step": {"tp": LAYERS, "dp": 1, "world": 1}, "slow_rank": 1, "slow_factor": 4},
    "p2p": {"pairs": [[0, 2], [1, 3], [2, 0], [3, 1]], "per_step": {"send": 1, "recv": 1, "stage_all_reduce": 1},
            "groups": {"stage": [[0, 1], [2, 3]]}, "via_group": {"0->2": [0, 2]}},
    "alltoall": {"splits": SPLITS, "popular_rank": 1},
}


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def record(case: str, out: Path) -> bool:
    target = out / case
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent), OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(_free_port()),
               __file__, "--worker", case, tmp]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        traces = sorted(Path(tmp).glob("rank-*.pt.trace.json.gz"))
        if proc.returncode != 0 or len(traces) != 4:
            sys.stderr.write(f"{case}: the job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}\n")
            return False
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for trace in traces:
            shutil.copy(trace, target / trace.name)
    job = {"case": case, "ranks": 4, "backend": "gloo", "steps_profiled": STEPS, "script": "scripts/record_group_jobs.py",
           **TRUTH[case]}
    (target / "job.md").write_text("```json\n" + json.dumps(job, indent=1) + "\n```\n", encoding="utf-8")
    return True


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], Path(sys.argv[3]))
        end_job(0)  # a gloo rank ends without the interpreter's teardown (scripts/job_exit.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", action="append", choices=CASES)
    args = parser.parse_args()
    ok = all([record(case, args.out) for case in (args.case or CASES)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
