"""A small, real pipeline-parallel training job (2 stages x 2 replicas by default); run it under torchrun.

Promise: launched as ``torchrun --nproc-per-node 4 scripts/pipeline_job.py --trace-dir DIR ...`` on CPU with
gloo, the ranks form a PP x DP grid in Megatron's rank order "tp-cp-ep-dp-pp" (TP = CP = EP = 1, so
``rank = replica + dp * stage``: the data-parallel groups are {0,1} and {2,3}, the pipeline pairs {0,2} and
{1,3}). Each stage holds a slice of a small MLP; every step runs ``--microbatches`` micro-batches through the
pipeline with ``--schedule`` (1F1B, or GPipe: all forwards, then all backwards), activations sent forward and
gradients backward with ``dist.isend``/``dist.irecv`` over the pipeline group, then one ``all_reduce`` of the
stage's flattened gradients over its own data-parallel group, then an SGD step. Groups are made with
``dist.new_group(group_desc=...)`` and Megatron's names (DATA_PARALLEL_GROUP, PIPELINE_MODEL_PARALLEL_GROUP),
so every trace's ``distributedInfo.pg_config`` lists them.

torch.profiler records ``--profile-steps`` steps after one wait and one warm-up step (``record_shapes``,
``ProfilerStep#N`` marks); each rank writes ``DIR/rank-<r>.pt.trace.json.gz``. ``--layers-stage0/1`` set the
stage split (imbalance); ``--slow-rank R --slow-factor F`` make rank R run F-1 extra no-grad passes of its
stage in every micro-batch's forward (a ``record_function("extra_work")`` region): a really slower worker.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

# The script runs as `python scripts/pipeline_job.py`, so the repository root is not on sys.path.
_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

# the one definition of the GPipe / 1F1B orders
from perftracker.analyzers.pipeline.schedule_sim import pass_order

PROFILER_WAIT = 1
PROFILER_WARMUP = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-dir", type=Path, required=True, help="folder the ranks' traces go to")
    parser.add_argument("--dp", type=int, default=2, help="data-parallel replicas (world size / dp = stages)")
    parser.add_argument("--layers-stage0", type=int, default=4, help="hidden layers of the first stage")
    parser.add_argument("--layers-stage1", type=int, default=4, help="hidden layers of every later stage")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    parser.add_argument("--slow-rank", type=int, default=-1, help="rank to slow down; -1 for none")
    parser.add_argument("--slow-factor", type=float, default=3.0, help="slowed rank's forward does ~F x compute")
    parser.add_argument("--profile-steps", type=int, default=3, help="recorded steps")
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--rows", type=int, default=64, help="rows of one micro-batch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.microbatches < 1 or args.profile_steps < 1 or args.dp < 1:
        parser.error("--microbatches, --profile-steps and --dp must be >= 1")
    return args


class Stage(nn.Module):
    """One pipeline stage: `layers` Linear+ReLU blocks; the last stage adds the head and the loss."""

    def __init__(self, width: int, layers: int, last: bool, extra: int) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for _ in range(layers):
            blocks += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, 10) if last else None
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.extra:
            with record_function("extra_work"), torch.no_grad():
                for _ in range(self.extra):
                    self.body(x)
        out: torch.Tensor = self.body(x)
        return self.head(out) if self.head is not None else out


def make_groups(world: int, dp: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup]:
    """Megatron's order tp-cp-ep-dp-pp with TP=CP=EP=1: DP groups are runs of `dp` consecutive ranks, PP groups
    take every `dp`-th rank. Every rank creates every group in the same order; it keeps its own."""
    rank = dist.get_rank()
    stages = world // dp
    mine_dp = mine_pp = None
    for s in range(stages):
        ranks = [s * dp + r for r in range(dp)]
        g = dist.new_group(ranks, group_desc="DATA_PARALLEL_GROUP")
        if rank in ranks:
            mine_dp = g
    for r in range(dp):
        ranks = [s * dp + r for s in range(stages)]
        g = dist.new_group(ranks, group_desc="PIPELINE_MODEL_PARALLEL_GROUP")
        if rank in ranks:
            mine_pp = g
    assert mine_dp is not None and mine_pp is not None
    return mine_dp, mine_pp


def gzip_handler(dest: Path):  # type: ignore[no-untyped-def]
    dest.parent.mkdir(parents=True, exist_ok=True)

    def handler(prof: profile) -> None:
        raw = dest.with_name(dest.name.removesuffix(".gz"))
        prof.export_chrome_trace(str(raw))
        tmp = dest.with_name(f".{dest.name}.tmp")
        with open(raw, "rb") as src, gzip.open(tmp, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, dest)
        raw.unlink(missing_ok=True)

    return handler


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.dp:
        raise SystemExit(f"pipeline_job: world size {world} is not a multiple of --dp {args.dp}")
    stages = world // args.dp
    stage, replica = divmod(rank, args.dp)
    dp_group, pp_group = make_groups(world, args.dp)
    prev_rank = rank - args.dp if stage > 0 else -1
    next_rank = rank + args.dp if stage < stages - 1 else -1
    last = next_rank < 0
    layers = args.layers_stage0 if stage == 0 else args.layers_stage1
    extra = max(0, round(args.slow_factor) - 1) if rank == args.slow_rank else 0
    torch.manual_seed(args.seed + stage)  # replicas of a stage start equal
    model = Stage(args.width, layers, last, extra)
    params = [p for p in model.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.Generator().manual_seed(args.seed + 1000 * (replica + 1))
    m, rows, width = args.microbatches, args.rows, args.width
    order = pass_order(args.schedule, stage, stages, m)
    steps = PROFILER_WAIT + PROFILER_WARMUP + args.profile_steps
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=PROFILER_WAIT, warmup=PROFILER_WARMUP, active=args.profile_steps, repeat=1),
        on_trace_ready=gzip_handler(args.trace_dir / f"rank-{rank}.pt.trace.json.gz"),
        record_shapes=True,
    )
    dist.barrier()
    step_ms: list[float] = []
    with prof:
        for _step in range(steps):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            inputs: dict[int, torch.Tensor] = {}
            outputs: dict[int, torch.Tensor] = {}
            sends: list[dist.Work] = []
            for kind, i in order:
                if kind == "F":
                    with record_function(f"forward_mb{i}"):
                        if stage == 0:
                            x = torch.randn(rows, width, generator=data)
                        else:
                            x = torch.empty(rows, width)
                            dist.irecv(x, src=prev_rank, group=pp_group).wait()
                            x.requires_grad_(True)
                        y = model(x)
                        if last:
                            target = torch.randint(0, 10, (rows,), generator=data)
                            y = loss_fn(y, target) / m
                        else:
                            work = dist.isend(y.detach().contiguous(), dst=next_rank, group=pp_group)
                            if work is not None:
                                sends.append(work)
                        inputs[i], outputs[i] = x, y
                else:
                    with record_function(f"backward_mb{i}"):
                        y = outputs.pop(i)
                        if last:
                            y.backward()
                        else:
                            grad = torch.empty_like(y)
                            dist.irecv(grad, src=next_rank, group=pp_group).wait()
                            y.backward(grad)
                        x = inputs.pop(i)
                        if stage > 0 and x.grad is not None:
                            work = dist.isend(x.grad.contiguous(), dst=prev_rank, group=pp_group)
                            if work is not None:
                                sends.append(work)
            for work in sends:
                work.wait()
            with record_function("grad_all_reduce"):
                flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
                dist.all_reduce(flat, group=dp_group)
                flat /= args.dp
                offset = 0
                for p in params:
                    if p.grad is not None:
                        n = p.grad.numel()
                        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
                        offset += n
            with record_function("optimizer"):
                optimizer.step()
            step_ms.append((time.perf_counter() - t0) * 1e3)
            prof.step()
    dist.barrier()
    if rank == 0:
        print(json.dumps({"step_ms": [round(t, 1) for t in step_ms]}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from job_exit import end_job  # (scripts/, beside this file)

    end_job(main())
