"""A small, real DDP training job that writes a perftracker run directory; run it under torchrun.

Promise: launched as ``torchrun --nproc_per_node N scripts/sample_job.py --run-dir RUN ...`` on CPU,
every rank trains the same small MLP with DistributedDataParallel over gloo on synthetic data and
writes, into ``RUN`` (format of ``perftracker/rundir.py``):

* ``traces/rank-<r>.pt.trace.json.gz``: a Kineto trace of ``--profile-steps`` consecutive steps
  (``ProfilerStep#N`` annotations, user annotations ``data``/``forward``/``backward``/``optimizer``,
  DDP's gloo all-reduce, and ``distributedInfo`` because the process group is up before profiling);
* ``steps/rank-<r>.jsonl``: one line per step, for every step of the run, flushed as it is written;
* ``env/rank-<r>.json``: the rank's environment, filtered to an allow-list, secret-looking names
  dropped.

``--slow-rank R --slow-factor F`` makes rank R really slower: inside its model's forward, in a
``record_function("extra_work")`` region, it runs F-1 extra no-grad passes of the model on the batch
(F rounded to whole passes; F <= 1: none); ``--extra-compute E`` instead adds passes over about E of its
step's compute in rows (`extra_passes`). The others then wait for rank R in the gradient all-reduce: in the
step files R shows a longer *forward*, the others a longer *backward*; step times stay close (DDP syncs).

``--hang-rank R --hang-step N`` makes the job hang for good, as a real job does when one rank stops:
at step N every rank calls an explicit ``dist.all_reduce`` of its loss after the optimizer step,
except rank R, which sleeps forever in ``hang_forever`` just before it; the other ranks then block in
that ``all_reduce`` (until the process group's timeout). Without these options nothing changes.

The launcher writes the manifest (``scripts/sample_job_runner.py``); a finished rank ends as ``scripts/job_exit.py`` says.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule

# The script runs as `python scripts/sample_job.py`, so the repository root is not on sys.path.
_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from perftracker.redaction import safe_env
from perftracker.rundir import append_jsonl, atomic_write_text, step_file, trace_file

ENV_PREFIXES = ("NCCL_", "TORCH_", "CUDA_", "GLOO_", "OMP_", "MASTER_")
ENV_NAMES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"})
PROFILER_WAIT = 1
PROFILER_WARMUP = 1


# Belt and braces: an allow-listed prefix can still carry a secret (NCCL_PASS, TORCH_HUB_CREDS, ...) and a
# kept name a credential in its value (a URL with user info, a token parameter). The rules are the ones
# perftracker applies to every environment it captures (perftracker/redaction.py), so the env files this
# job writes never hold more than `perftracker attach` would keep.

def allowed_env(environ: dict[str, str]) -> dict[str, str]:
    """The part of `environ` that is safe and useful to keep: these names and prefixes, by perftracker's own
    rules for secrets (`perftracker.redaction.safe_env`: secret-looking names even under an allowed prefix,
    values carrying credentials)."""
    return {key: value for key, value in sorted(safe_env(environ).items())
            if key in ENV_NAMES or key.startswith(ENV_PREFIXES)}


class SlowableMLP(nn.Module):
    """An MLP whose forward does extra no-grad passes over `extra` rows each (None: all; real compute, labelled)."""

    def __init__(self, width: int, depth: int, classes: int, extra: tuple[int | None, ...] = ()) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.extra:
            with record_function("extra_work"), torch.no_grad():
                for rows in self.extra:
                    self.head(self.body(x[:rows]))
        out: torch.Tensor = self.head(self.body(x))
        return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="run directory to write into")
    parser.add_argument("--steps", type=int, default=30, help="total training steps")
    parser.add_argument("--profile-steps", type=int, default=5, help="active (recorded) profiler steps")
    parser.add_argument(
        "--profile-skip", type=int, default=-1,
        help="steps before the profiler's wait/warmup/active window; -1: profile the last steps",
    )
    parser.add_argument("--extra-compute", type=float, default=0.0, help="slowed rank's forward adds about this "
                        "fraction of its step's compute (e.g. 0.15) in place of --slow-factor; 0: not used")
    parser.add_argument("--slow-rank", type=int, default=-1, help="rank to slow down; -1 for none")
    parser.add_argument(
        "--slow-factor", type=float, default=4.0, help="slowed rank's forward does ~F times the compute"
    )
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds slept in each data phase")
    parser.add_argument("--hang-rank", type=int, default=-1, help="rank that hangs at --hang-step; -1 for none")
    parser.add_argument("--hang-step", type=int, default=-1, help="step whose explicit all_reduce rank R never joins")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per rank, LOCAL_RANK)")
    parser.add_argument("--backend", default="gloo", help="gloo, or nccl (with --device cuda)")
    parser.add_argument("--raise-rank", type=int, default=-1, help="rank that raises an error at --raise-step")
    parser.add_argument("--raise-step", type=int, default=-1, help="step at which --raise-rank raises")
    parser.add_argument("--pg-timeout", type=float, default=120.0, help="process-group timeout in seconds")
    parser.add_argument("--hook", action="store_true", help="call perftracker.hooks.install() (step times and "
                        "on-demand traces for `perftracker attach`)")
    parser.add_argument("--print-steps", action="store_true", help="rank 0 prints a Megatron-LM style line per step "
                        "(`iteration N/ M | elapsed time per iteration (ms): X |`) on stdout: the step times of a job "
                        "without the hook, for `attach` to follow")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.profile_steps < 0:
        parser.error("--steps must be >= 1 and --profile-steps >= 0")
    return args


def profile_skip(args: argparse.Namespace) -> int:
    """How many steps the profiler skips before its wait/warmup/active window."""
    skip: int = args.profile_skip
    if skip >= 0:
        return skip
    steps: int = args.steps
    active: int = args.profile_steps
    return max(0, steps - active - PROFILER_WAIT - PROFILER_WARMUP)


def gzip_trace_handler(dest: Path) -> Callable[[profile], None]:
    """An on_trace_ready handler: export the chrome trace and gzip it atomically to `dest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)

    def handler(prof: profile) -> None:
        # Export next to `dest` under its uncompressed name (the trace records it as traceName),
        # then gzip; readers only ever see the finished .gz, moved into place atomically.
        raw = dest.with_suffix("")
        packed = dest.with_name(f".{dest.name}.tmp")
        prof.export_chrome_trace(str(raw))
        try:
            with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            os.replace(packed, dest)
        finally:
            raw.unlink(missing_ok=True)
            packed.unlink(missing_ok=True)

    return handler


def hang_forever() -> None:
    """Stand-in for a rank that stops making progress (stuck I/O, a deadlock, a dead GPU)."""
    while True:
        time.sleep(3600)


def write_env(run: Path, rank: int, host: str) -> None:
    record: dict[str, Any] = {
        "rank": rank,
        "host": host,
        "pid": os.getpid(),
        "env": allowed_env(dict(os.environ)),
    }
    atomic_write_text(run / "env" / f"rank-{rank}.json", json.dumps(record, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, timeout=timedelta(seconds=args.pg_timeout))
    if args.hook:
        import perftracker.hooks

        perftracker.hooks.install()
    rank = dist.get_rank()
    host = socket.gethostname()
    run: Path = args.run_dir
    write_env(run, rank, host)

    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts them anyway)
    extra = extra_passes(args.slow_factor, args.extra_compute, args.batch) if rank == args.slow_rank else ()
    model = SlowableMLP(args.width, args.depth, classes=10, extra=extra)
    model = model.to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data_gen = torch.Generator().manual_seed(args.seed + 1000 * (rank + 1))
    steps_path = step_file(run, rank)
    steps_path.unlink(missing_ok=True)

    prof = (
        profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else []),
            schedule=schedule(
                skip_first=profile_skip(args),
                wait=PROFILER_WAIT,
                warmup=PROFILER_WARMUP,
                active=args.profile_steps,
                repeat=1,
            ),
            on_trace_ready=gzip_trace_handler(trace_file(run, rank)),
            record_shapes=True,
        )
        if args.profile_steps > 0
        else None
    )
    dist.barrier()
    with prof if prof is not None else contextlib.nullcontext():
        for step in range(args.steps):
            start_ns = time.time_ns()
            t0 = time.perf_counter_ns()
            with record_function("data"):
                x = torch.randn(args.batch, args.width, generator=data_gen).to(device, non_blocking=True)
                y = torch.randint(0, 10, (args.batch,), generator=data_gen).to(device, non_blocking=True)
                if args.step_sleep > 0:
                    time.sleep(args.step_sleep)
            t1 = time.perf_counter_ns()
            with record_function("forward"):
                loss = loss_fn(ddp(x), y)
            t2 = time.perf_counter_ns()
            with record_function("backward"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # DDP all-reduces the gradients (gloo) and waits for them here
            t3 = time.perf_counter_ns()
            with record_function("optimizer"):
                optimizer.step()
            if step == args.raise_step and rank == args.raise_rank:
                raise RuntimeError(f"sample_job: rank {rank} failed on purpose at step {step} (--raise-rank)")
            if step == args.hang_step and args.hang_rank >= 0:
                if rank == args.hang_rank:
                    hang_forever()
                dist.all_reduce(loss.detach())  # the collective the other ranks wait in
            t4 = time.perf_counter_ns()
            end_ns = time.time_ns()
            append_jsonl(
                steps_path,
                {
                    "rank": rank,
                    "step": step,
                    "start_ns": start_ns,
                    "end_ns": end_ns,
                    "host": host,
                    "phases_ns": {
                        "data": t1 - t0,
                        "forward": t2 - t1,
                        "backward": t3 - t2,
                        "optimizer": t4 - t3,
                    },
                },
            )
            if args.print_steps and rank == 0:
                print(f" iteration {step:8d}/{args.steps:8d} | elapsed time per iteration (ms): "
                      f"{(end_ns - start_ns) / 1e6:.1f} |", flush=True)
            if prof is not None:
                prof.step()
    dist.barrier()
    dist.destroy_process_group()
    return 0


# A training step's compute over one forward pass's, as this job's own CPU traces measure it at width 256,
# depth 1, batch 2048 (`perftracker.analyzers.stragglers.op_work`: each op at its shortest own time); the runs
# of tests/fixtures/accuracy_excess record the excess each really showed.
STEP_PER_FORWARD = 2.4


def extra_passes(slow_factor: float, extra_compute: float, batch: int) -> tuple[int | None, ...]:
    """The slowed rank's extra no-grad passes, as rows each (None: the whole batch): with `extra_compute` > 0,
    round(STEP_PER_FORWARD x extra_compute x batch) rows (whole batches, then a slice of one), about that
    fraction of its step's compute; else `slow_factor` - 1 whole passes (rounded; none at 1 or below)."""
    if extra_compute <= 0:
        return (None,) * max(0, round(slow_factor) - 1)
    rows = max(0, round(STEP_PER_FORWARD * extra_compute * batch))
    return (batch,) * (rows // batch) + ((rows % batch,) if rows % batch else ())


if __name__ == "__main__":
    from job_exit import end_job  # (scripts/, beside this file)

    end_job(main())
