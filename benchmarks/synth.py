"""Synthetic N-rank PyTorch profiler (Kineto) traces with exactly known stragglers, clock skew and collectives.

Promise:
- `generate(spec, folder)` writes one `rank-<r>.pt.trace.json[.gz]` per rank (except `missing_ranks`) in the
  format newer PyTorch writes: `distributedInfo` (rank, world_size, pg_config), `deviceProperties`,
  `baseTimeNanoseconds`, `ProfilerStep#N` annotations, compute kernels on stream 7 launched by a `cpu_op`
  plus `cudaLaunchKernel` (same `correlation`, `ac2g` flow events), and per collective a `record_param_comms`
  cpu_op ("Collective name", "Process Group Name", "Process Group Ranks", "Group size", "In msg nelems",
  "Out msg nelems", "dtype"), an `nccl:<op>` annotation, a `cudaLaunchKernel` and an `ncclDevKernel_*`
  on the group's own stream (20 + the group's partition) carrying the same collective args.
- The physics is exact and consistent, computed in integer nanoseconds of one true clock: in every slot of a
  step, each rank runs its compute kernels (planned durations + noise; a straggler's `stragglers[r]` extra is
  spread over the slot's kernels in proportion to their durations, like a slower GPU) and then arrives at the slot's collective. The collective kernel on rank r
  starts when r arrives and ends at the same true time on every member:
  max arrival over the group + transfer time + the largest `comm_stragglers` extra among its members.
  The next compute starts when the rank's collective ends. Then each rank's clock skew is added to every
  timestamp written for that rank. Timestamps are written as microseconds with 3 decimals and load back to
  the exact nanosecond, so `end - skew` of one collective instance is *equal* on all its members.
- Ranks are written one file at a time; no more than one rank's events are ever in memory.
- The same spec (seed included) gives byte-identical files.
- `ground_truth.json` (also returned as `GroundTruth`) records per-rank skew, stragglers with their nominal
  and simulated cost, every process group with its collective count, every collective instance (true end
  time, last arriver, the wait it caused) and event / byte totals.

Groups: `groups=None` is one world group ("0", default_pg). Otherwise a list of rank lists (for instance
`tp_dp_groups(8, 2)`); it is split in order into *partitions* of disjoint groups, and collective slot c of
every step uses partition c % (number of partitions). A rank in no group of that partition has no collective
in that slot and keeps computing.

A communication straggler makes every collective of its groups end later for all members; with the ends
simultaneous, its kernels are longer exactly as its group peers' are, so within one group it is
indistinguishable from a slow link: only groups with and without it tell it apart.

CLI: `python benchmarks/synth.py --ranks 8 --out DIR [--straggler 3:2000] [--comm-straggler 5:1000]
[--seed S] [--target-mb 5] [--tp 2] [--steps N] [--missing R] [--no-gzip]`.
"""

from __future__ import annotations

import argparse
import gzip as gzip_mod
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson
from synth_model import (  # noqa: F401  (re-exported: the public API lives here)
    BASE_TIME_NS,
    FIRST_STEP,
    GROUND_TRUTH,
    GROUND_TRUTH_FORMAT,
    GROUND_TRUTH_VERSION,
    GZIP_LEVEL,
    NCCL_STREAM_BASE,
    InstanceTruth,
    SynthSpec,
    _make_plan,
    _Plan,
    _rank_document,
    _scaled_kernels,
)


@dataclass
class GroupTruth:
    name: str  # "Process Group Name"
    desc: str
    ranks: list[int]
    partition: int  # collective slots c with c % partitions == partition use this group
    stream: int  # NCCL stream of its kernels on every member
    collectives: int  # instances in the whole trace
    collectives_per_step: int


@dataclass
class StragglerTruth:
    rank: int
    kind: str  # "compute" | "comm"
    extra_us: float  # per collective the rank takes part in
    collectives_per_step: int  # collectives per step the rank takes part in
    expected_cost_us_per_step: float  # extra_us * collectives_per_step: what the others wait per step
    simulated_cost_us_per_step: float  # compute: its arrival minus the next-latest member's, summed per step
    share_last: float  # compute: share of its collectives where it arrived last (comm: 0)


@dataclass
class GroundTruth:
    format: str
    version: int
    spec: dict[str, Any]
    world_size: int
    written_ranks: list[int]
    missing_ranks: list[int]
    steps: list[int]  # ProfilerStep numbers
    kernels_per_step: int  # after target_mb_per_rank scaling
    collectives_per_step: int
    skew_us: dict[int, float]
    stragglers: dict[int, StragglerTruth]
    comm_stragglers: dict[int, StragglerTruth]
    process_groups: dict[str, GroupTruth]
    comm_kernels_per_rank: dict[int, int]
    instances: list[InstanceTruth]
    events_total: int  # every traceEvents entry written (metadata and flow events included)
    events_complete: int  # complete ('X') events perftracker loads (all but the 'Trace' span)
    bytes_json: int  # uncompressed JSON bytes written, all ranks
    files: list[str]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("skew_us", "stragglers", "comm_stragglers", "comm_kernels_per_rank"):
            out[key] = {str(k): v for k, v in out[key].items()}
        return out


def tp_dp_groups(ranks: int, tp: int) -> list[list[int]]:
    """Tensor-parallel groups of `tp` consecutive ranks, then data-parallel groups (same TP index)."""
    if tp < 1 or ranks % tp:
        raise ValueError(f"tp={tp} must divide ranks={ranks}")
    tp_groups = [list(range(i, i + tp)) for i in range(0, ranks, tp)]
    dp_groups = [list(range(j, ranks, tp)) for j in range(tp)]
    return tp_groups + dp_groups


def read_ground_truth(path: Path) -> dict[str, Any]:
    """The ground truth `generate` wrote (`path`: the file, or the folder holding ground_truth.json),
    as plain JSON (rank keys are strings)."""
    file = path / GROUND_TRUTH if path.is_dir() else path
    data: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    return data


def generate(spec: SynthSpec, folder: Path, gzip: bool = True, truth_path: Path | None = None) -> GroundTruth:
    """Write every rank's trace (one at a time) into `folder`, and the ground truth to `truth_path`
    (default `folder/ground_truth.json`); return the truth.

    `perftracker analyze` on a folder reads every *.json in it and notes that ground_truth.json is not
    a trace (an "error" note; the analysis still runs): pass a `truth_path` outside `folder` to avoid it.
    """
    if spec.target_mb_per_rank is not None:
        spec = replace(spec, kernels_per_step=_scaled_kernels(spec))
    plan = _make_plan(spec)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".pt.trace.json.gz" if gzip else ".pt.trace.json"
    events_total = events_complete = bytes_json = 0
    files: list[str] = []
    comm_per_rank: dict[int, int] = {}
    for rank in range(spec.ranks):
        comm_per_rank[rank] = sum(1 for c in range(spec.collectives_per_step)
                                  if plan.group_of[c % plan.partitions, rank] >= 0) * spec.steps
        if rank in spec.missing_ranks:
            continue
        doc = _rank_document(plan, rank)
        evs = doc["traceEvents"]
        events_total += len(evs)
        events_complete += sum(1 for e in evs if e["ph"] == "X" and e.get("cat") != "Trace")
        data = orjson.dumps(doc)
        del doc, evs
        bytes_json += len(data)
        path = folder / f"rank-{rank}{suffix}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(gzip_mod.compress(data, compresslevel=GZIP_LEVEL, mtime=0) if gzip else data)
        os.replace(tmp, path)
        files.append(path.name)
        del data

    truth = _truth(plan, comm_per_rank, events_total, events_complete, bytes_json, files)
    truth_file = truth_path or folder / GROUND_TRUTH
    truth_file.parent.mkdir(parents=True, exist_ok=True)
    truth_file.write_text(json.dumps(truth.to_dict(), indent=1) + "\n", encoding="utf-8")
    return truth


def _truth(plan: _Plan, comm_per_rank: dict[int, int], events_total: int, events_complete: int,
           bytes_json: int, files: list[str]) -> GroundTruth:
    spec = plan.spec
    slots = spec.collectives_per_step
    per_step = {gi: sum(1 for c in range(slots) if c % plan.partitions == g.partition)
                for gi, g in enumerate(plan.groups)}
    groups = {g.name: GroupTruth(g.name, g.desc, g.ranks, g.partition, NCCL_STREAM_BASE + g.partition,
                                 per_step[gi] * spec.steps, per_step[gi]) for gi, g in enumerate(plan.groups)}
    member_of = {g.name: set(g.ranks) for g in plan.groups}

    def straggler(rank: int, extra: float, kind: str) -> StragglerTruth:
        n = comm_per_rank[rank] // spec.steps
        mine = [i for i in plan.instances if rank in member_of[i.pg]]
        cost = share = 0.0
        if kind == "compute" and mine:
            last = [i for i in mine if i.last_rank == rank]
            cost = sum(i.wait_caused_us for i in last) / spec.steps
            share = len(last) / len(mine)
        return StragglerTruth(rank, kind, extra, n, extra * n, round(cost, 3), round(share, 4))

    spec_dict = asdict(spec)
    for key in ("stragglers", "comm_stragglers", "skew_us"):
        spec_dict[key] = {str(k): v for k, v in spec_dict[key].items()}
    spec_dict["missing_ranks"] = sorted(spec.missing_ranks)
    return GroundTruth(
        format=GROUND_TRUTH_FORMAT, version=GROUND_TRUTH_VERSION, spec=spec_dict, world_size=spec.ranks,
        written_ranks=[r for r in range(spec.ranks) if r not in spec.missing_ranks],
        missing_ranks=sorted(spec.missing_ranks), steps=[FIRST_STEP + s for s in range(spec.steps)],
        kernels_per_step=spec.kernels_per_step, collectives_per_step=slots,
        skew_us={r: int(plan.skew_ns[r]) / 1000 for r in range(spec.ranks)},
        stragglers={r: straggler(r, v, "compute") for r, v in sorted(spec.stragglers.items())},
        comm_stragglers={r: straggler(r, v, "comm") for r, v in sorted(spec.comm_stragglers.items())},
        process_groups=groups, comm_kernels_per_rank=comm_per_rank, instances=plan.instances,
        events_total=events_total, events_complete=events_complete, bytes_json=bytes_json, files=files,
    )


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

def _rank_value(text: str) -> tuple[int, float]:
    rank, _, value = text.partition(":")
    try:
        return int(rank), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:MICROSECONDS, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/synth.py",
                                     description="Write synthetic N-rank PyTorch profiler traces with known "
                                     "stragglers and clock skew, plus ground_truth.json.")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder to write (created)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--kernels-per-step", type=int, default=40)
    parser.add_argument("--collectives-per-step", type=int, default=4)
    parser.add_argument("--step-us", type=float, default=100_000.0)
    parser.add_argument("--straggler", type=_rank_value, action="append", default=[], metavar="RANK:US",
                        help="extra compute microseconds before every collective (repeatable)")
    parser.add_argument("--comm-straggler", type=_rank_value, action="append", default=[], metavar="RANK:US",
                        help="extra transfer microseconds on every collective of the rank's groups (repeatable)")
    parser.add_argument("--skew", type=_rank_value, action="append", default=[], metavar="RANK:US",
                        help="clock offset of a rank (others: random within +-max-skew-us)")
    parser.add_argument("--max-skew-us", type=float, default=5000.0)
    parser.add_argument("--noise-us", type=float, default=50.0)
    parser.add_argument("--tp", type=int, default=0, help="tensor-parallel size: TP groups plus DP groups")
    parser.add_argument("--missing", type=int, action="append", default=[], metavar="RANK",
                        help="simulate but do not write this rank (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-mb", type=float, default=None, help="about this many MB of JSON per rank")
    parser.add_argument("--no-gzip", action="store_true", help="write .json instead of .json.gz")
    args = parser.parse_args(argv)
    try:
        spec = SynthSpec(
            ranks=args.ranks, steps=args.steps, kernels_per_step=args.kernels_per_step,
            collectives_per_step=args.collectives_per_step, step_us=args.step_us, seed=args.seed,
            stragglers=dict(args.straggler), comm_stragglers=dict(args.comm_straggler), skew_us=dict(args.skew),
            max_skew_us=args.max_skew_us, noise_us=args.noise_us,
            groups=tp_dp_groups(args.ranks, args.tp) if args.tp else None, missing_ranks=set(args.missing),
            target_mb_per_rank=args.target_mb)
        truth = generate(spec, args.out, gzip=not args.no_gzip)
    except ValueError as exc:
        print(f"benchmarks/synth.py: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(truth.files)} rank traces to {args.out}: {truth.events_complete:,} complete events, "
          f"{truth.bytes_json / 1e6:.1f} MB of JSON ({truth.bytes_json / 1e6 / max(1, len(truth.files)):.2f} MB per "
          f"rank), {truth.kernels_per_step} kernels per step; ground truth in {args.out / GROUND_TRUTH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
