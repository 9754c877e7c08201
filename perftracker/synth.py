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

CLI: `python -m perftracker.synth --ranks 8 --out DIR [--straggler 3:2000] [--comm-straggler 5:1000]
[--seed S] [--target-mb 5] [--tp 2] [--steps N] [--missing R] [--no-gzip]`.
"""

from __future__ import annotations

import argparse
import gzip as gzip_mod
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

GROUND_TRUTH = "ground_truth.json"
GROUND_TRUTH_FORMAT = "perftracker-synth-ground-truth"
GROUND_TRUTH_VERSION = 1
COMPUTE_STREAM = 7
NCCL_STREAM_BASE = 20
COMPUTE_SHARE = 0.8  # of step_us spent in compute kernels; the rest is collective transfer time
STEP_GAP_US = 200.0  # idle time between the end of a step's last collective and the next step
START_SPREAD_US = 200.0  # ranks start their first step up to this much apart (true time)
LAUNCH_LEAD_NS = 1_000  # a launch's cpu_op ends this long before its kernel starts
FIRST_STEP = 10  # ProfilerStep#10, #11, ... (profilers usually skip warm-up steps)
BASE_TIME_NS = 1_700_000_000_000_000_000
GZIP_LEVEL = 1

# (compute kernel name, launching cpu_op, relative duration)
_COMPUTE_KERNELS: tuple[tuple[str, str, float], ...] = (
    (("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
     "_kernel__5x_cublas"), "aten::mm", 3.0),
    (("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"),
     "aten::native_layer_norm", 0.4),
    (("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
     "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
     "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"),
     "aten::_scaled_dot_product_flash_attention", 2.0),
    (("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
     "BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
     "BFloat16)#1}, at::detail::Array<char*, 2>)"), "aten::gelu", 0.5),
    (("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off"
     "_kernel__5x_cublas"), "aten::mm", 3.0),
    (("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add"
     "<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)"
     "#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >(at::"
     "TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1})"), "aten::add_",
     0.3),
)

# (Collective name, CPU annotation, NCCL kernel name, out/in element ratio: 1 same, "g" x group, "1/g")
_COLLECTIVE_OPS: tuple[tuple[str, str, str, str], ...] = (
    ("allreduce", "nccl:all_reduce", ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, "
     "ncclWork*)"), "1"),
    ("_allgather_base", "nccl:_all_gather_base", ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, "
     "ncclWork*)"), "g"),
    ("_reduce_scatter_base", "nccl:_reduce_scatter_base", ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL("
     "ncclDevComm*, unsigned long, ncclWork*)"), "1/g"),
    ("broadcast", "nccl:broadcast", "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "1"),
)

_DEVICE_PROPERTIES: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85024112640, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}

IntArray = npt.NDArray[np.int64]


@dataclass
class SynthSpec:
    """What to generate. Times in microseconds of the true (unskewed) clock."""

    ranks: int
    steps: int = 5
    kernels_per_step: int = 40  # compute kernels per step per rank, spread over the collective slots
    collectives_per_step: int = 4  # collective slots per step
    step_us: float = 100_000.0  # nominal step: COMPUTE_SHARE of it compute, the rest transfer
    seed: int = 0
    stragglers: dict[int, float] = field(default_factory=dict)  # rank -> extra compute us before every collective
    comm_stragglers: dict[int, float] = field(default_factory=dict)  # rank -> extra transfer us per collective
    skew_us: dict[int, float] = field(default_factory=dict)  # rank -> clock offset; others random in +-max_skew_us
    max_skew_us: float = 5000.0
    noise_us: float = 50.0  # std of the compute time before each collective (per-kernel jitter)
    groups: list[list[int]] | None = None  # None: one world group
    missing_ranks: set[int] = field(default_factory=set)  # simulated but not written
    target_mb_per_rank: float | None = None  # scale kernels_per_step to reach ~this many MB of JSON per rank
    t0_us: float = 500_000_000_000.0  # true time of the first step (12 digits: floats stay exact to 1 ns)

    def validate(self) -> None:
        if self.ranks < 1:
            raise ValueError("ranks must be at least 1")
        if self.steps < 1 or self.collectives_per_step < 1:
            raise ValueError("steps and collectives_per_step must be at least 1")
        if self.kernels_per_step < self.collectives_per_step:
            raise ValueError("kernels_per_step must be at least collectives_per_step (one kernel per slot)")
        if self.step_us <= 0 or self.noise_us < 0 or self.max_skew_us < 0:
            raise ValueError("step_us must be positive; noise_us and max_skew_us not negative")
        for name, table in (("stragglers", self.stragglers), ("comm_stragglers", self.comm_stragglers),
                            ("skew_us", self.skew_us)):
            for r in table:
                if not 0 <= r < self.ranks:
                    raise ValueError(f"{name}: rank {r} is outside 0..{self.ranks - 1}")
        for name, table2 in (("stragglers", self.stragglers), ("comm_stragglers", self.comm_stragglers)):
            if any(v < 0 for v in table2.values()):
                raise ValueError(f"{name}: extra microseconds must not be negative")
        for g in self.groups or []:
            if not g or len(set(g)) != len(g) or any(not 0 <= r < self.ranks for r in g):
                raise ValueError(f"group {g}: needs distinct ranks within 0..{self.ranks - 1}")
        if any(not 0 <= r < self.ranks for r in self.missing_ranks):
            raise ValueError("missing_ranks must be within the world")


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
class InstanceTruth:
    pg: str
    seq: int  # k-th collective of this process group in the trace (0-based)
    step: int  # ProfilerStep number
    slot: int
    collective: str  # "Collective name"
    end_true_us: float  # end on every member, true clock (add a rank's skew for its trace time)
    last_rank: int  # the member that arrived last
    wait_caused_us: float  # last arrival minus the next-latest arrival (0 for a one-rank group)


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


def read_ground_truth(path: Path) -> dict[str, Any]:
    """The ground truth `generate` wrote (`path`: the file, or the folder holding ground_truth.json),
    as plain JSON (rank keys are strings)."""
    file = path / GROUND_TRUTH if path.is_dir() else path
    data: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    return data


def tp_dp_groups(ranks: int, tp: int) -> list[list[int]]:
    """Tensor-parallel groups of `tp` consecutive ranks, then data-parallel groups (same TP index)."""
    if tp < 1 or ranks % tp:
        raise ValueError(f"tp={tp} must divide ranks={ranks}")
    tp_groups = [list(range(i, i + tp)) for i in range(0, ranks, tp)]
    dp_groups = [list(range(j, ranks, tp)) for j in range(tp)]
    return tp_groups + dp_groups


# --------------------------------------------------------------------------------------------------
# The plan: physics for all ranks (small arrays), computed before any file is written.
# --------------------------------------------------------------------------------------------------

@dataclass
class _Group:
    name: str
    desc: str
    ranks: list[int]
    partition: int


@dataclass
class _Plan:
    spec: SynthSpec
    groups: list[_Group]
    partitions: int
    slot_kernels: list[int]  # compute kernels per slot
    slot_kernel_kinds: list[list[int]]  # index into _COMPUTE_KERNELS per kernel of a slot
    base_ns: list[IntArray]  # planned duration per kernel of a slot
    sigma_ns: list[float]  # per-kernel noise std per slot
    kmin_ns: int
    cpu_ns: int  # duration of a launching cpu_op
    transfer_ns: list[int]  # per slot
    nelems: list[int]  # per slot
    skew_ns: IntArray  # per rank
    seg_start: IntArray  # [step, slot, rank] true ns when the slot's compute starts
    arrival: IntArray  # [step, slot, rank] end of the slot's compute
    seg_end: IntArray  # [step, slot, rank] end of the slot's collective (= arrival without one)
    group_of: IntArray  # [partition, rank] index into groups, -1 none
    instances: list[InstanceTruth]


def _partition(groups: list[list[int]]) -> list[int]:
    """Partition index per group: the first partition whose groups are all disjoint from it."""
    used: list[set[int]] = []
    out: list[int] = []
    for g in groups:
        members = set(g)
        for i, taken in enumerate(used):
            if not taken & members:
                taken |= members
                out.append(i)
                break
        else:
            used.append(set(members))
            out.append(len(used) - 1)
    return out


def _rank_rng(seed: int, purpose: int, rank: int) -> np.random.Generator:
    return np.random.default_rng([seed, purpose, rank])


def _slot_durations(plan: _Plan, rank: int) -> list[IntArray]:
    """Compute kernel durations [step, kernel] per slot for one rank (the same on every call)."""
    spec = plan.spec
    rng = _rank_rng(spec.seed, 1, rank)
    extra_ns = round(spec.stragglers.get(rank, 0.0) * 1000)
    out: list[IntArray] = []
    for c, n in enumerate(plan.slot_kernels):
        noise = rng.normal(0.0, plan.sigma_ns[c], size=(spec.steps, n))
        dur = np.maximum(np.rint(plan.base_ns[c][None, :] + noise), plan.kmin_ns).astype(np.int64)
        if extra_ns:  # a slower GPU: every kernel longer in proportion to its duration
            share = (dur * extra_ns) // dur.sum(axis=1, keepdims=True)
            share[:, -1] += extra_ns - share.sum(axis=1)
            dur += share
        out.append(dur)
    return out


def _make_plan(spec: SynthSpec) -> _Plan:
    spec.validate()
    world = list(range(spec.ranks))
    raw_groups = [sorted(g) for g in spec.groups] if spec.groups else [world]
    groups: list[_Group] = []
    next_name = 1
    for members_list, part in zip(raw_groups, _partition(raw_groups)):
        if members_list == world:
            groups.append(_Group("0", "default_pg", members_list, part))
        else:
            groups.append(_Group(str(next_name), "undefined", members_list, part))
            next_name += 1
    partitions = max(g.partition for g in groups) + 1
    group_of = np.full((partitions, spec.ranks), -1, dtype=np.int64)
    for gi, grp in enumerate(groups):
        group_of[grp.partition, grp.ranks] = gi

    rng = np.random.default_rng([spec.seed, 0])
    slots = spec.collectives_per_step
    slot_kernels = [spec.kernels_per_step // slots + (1 if c < spec.kernels_per_step % slots else 0)
                    for c in range(slots)]
    compute_ns = spec.step_us * COMPUTE_SHARE * 1000 / slots  # per slot
    kinds: list[list[int]] = []
    base: list[IntArray] = []
    for c, n in enumerate(slot_kernels):
        kk = [(c * 7 + i) % len(_COMPUTE_KERNELS) for i in range(n)]
        weights = np.array([_COMPUTE_KERNELS[k][2] for k in kk]) * rng.uniform(0.7, 1.3, size=n)
        kinds.append(kk)
        base.append(np.maximum(np.rint(weights / weights.sum() * compute_ns), 1000).astype(np.int64))
    min_base = int(min(int(b.min()) for b in base))
    kmin = max(200, min_base // 4)
    cpu_ns = max(20, min(10_000, (kmin * 4) // 5))
    sigma = [spec.noise_us * 1000 / math.sqrt(n) for n in slot_kernels]
    transfer_total = spec.step_us * (1 - COMPUTE_SHARE) * 1000 / slots
    transfer = [round(transfer_total * f) for f in rng.uniform(0.6, 1.4, size=slots)]
    nelems = [int(x) * 1024 for x in rng.integers(1024, 32768, size=slots)]

    skew = np.array([round(spec.skew_us[r] * 1000) if r in spec.skew_us
                     else round(_rank_rng(spec.seed, 3, r).uniform(-spec.max_skew_us, spec.max_skew_us) * 1000)
                     for r in range(spec.ranks)], dtype=np.int64)
    start = np.array([round(spec.t0_us * 1000 + _rank_rng(spec.seed, 2, r).uniform(0, START_SPREAD_US) * 1000)
                      for r in range(spec.ranks)], dtype=np.int64)

    # Pass 1: per-slot compute totals for every rank (one rank's draws at a time).
    compute = np.zeros((spec.steps, slots, spec.ranks), dtype=np.int64)
    plan = _Plan(spec, groups, partitions, slot_kernels, kinds, base, sigma, kmin, cpu_ns, transfer, nelems, skew,
                 np.zeros_like(compute), np.zeros_like(compute), np.zeros_like(compute), group_of, [])
    for r in range(spec.ranks):
        for c, dur in enumerate(_slot_durations(plan, r)):
            compute[:, c, r] = dur.sum(axis=1)

    comm_extra = np.array([round(spec.comm_stragglers.get(r, 0.0) * 1000) for r in range(spec.ranks)],
                          dtype=np.int64)
    seq = [0] * len(groups)
    t = start.copy()
    gap = round(STEP_GAP_US * 1000)
    for s in range(spec.steps):
        for c in range(slots):
            plan.seg_start[s, c] = t
            arr = t + compute[s, c]
            plan.arrival[s, c] = arr
            end = arr.copy()
            p = c % partitions
            for gi, grp in enumerate(groups):
                if grp.partition != p:
                    continue
                members = np.asarray(grp.ranks)
                ga = arr[members]
                order = np.argsort(ga, kind="stable")
                last = int(members[order[-1]])
                e = int(ga.max()) + transfer[c] + int(comm_extra[members].max())
                end[members] = e
                wait = int(ga[order[-1]] - ga[order[-2]]) if len(members) > 1 else 0
                plan.instances.append(InstanceTruth(grp.name, seq[gi], FIRST_STEP + s, c, _collective(c)[0],
                                                    e / 1000, last, wait / 1000))
                seq[gi] += 1
            plan.seg_end[s, c] = end
            t = end
        t = t + gap
    return plan


def _collective(slot: int) -> tuple[str, str, str, str]:
    return _COLLECTIVE_OPS[slot % len(_COLLECTIVE_OPS)]


# --------------------------------------------------------------------------------------------------
# One rank's trace document.
# --------------------------------------------------------------------------------------------------

def _us(ns: int) -> float:
    return ns / 1000


def _ranks_text(ranks: Sequence[int]) -> str:
    return "[" + ", ".join(str(r) for r in ranks) + "]"


def _rank_document(plan: _Plan, rank: int) -> dict[str, Any]:
    spec = plan.spec
    skew = int(plan.skew_ns[rank])
    device = rank % 8
    cpu_pid = 100_000 + rank
    cpu_tid = cpu_pid
    cpu_ns = plan.cpu_ns
    durations = _slot_durations(plan, rank)
    events: list[dict[str, Any]] = []
    add = events.append
    corr = 1_000
    ext = 1
    group_args: dict[int, dict[str, Any]] = {}
    for gi, g in enumerate(plan.groups):
        if rank in g.ranks:
            group_args[gi] = {"Process Group Name": g.name, "Process Group Description": g.desc,
                              "Process Group Ranks": _ranks_text(g.ranks), "Group size": len(g.ranks)}
    for pi in range(plan.partitions):
        sid = NCCL_STREAM_BASE + pi
        if int(plan.group_of[pi, rank]) >= 0:
            add({"name": "thread_name", "ph": "M", "ts": _us(int(plan.seg_start[0, 0, rank]) + skew), "pid": device,
                 "tid": sid, "args": {"name": f"stream {sid} "}})

    def launch(start_ns: int, ext_id: int, corr_id: int) -> None:
        """cudaLaunchKernel inside [start_ns, start_ns + cpu_ns] plus the flow start."""
        lts = start_ns + (cpu_ns * 3) // 10 + skew
        add({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": cpu_pid, "tid": cpu_tid,
             "ts": _us(lts), "dur": _us((cpu_ns * 4) // 10),
             "args": {"External id": ext_id, "cbid": 211, "correlation": corr_id}})
        add({"ph": "s", "id": corr_id, "pid": cpu_pid, "tid": cpu_tid, "ts": _us(lts), "cat": "ac2g",
             "name": "ac2g"})

    for s in range(spec.steps):
        step_begin = int(plan.seg_start[s, 0, rank]) - LAUNCH_LEAD_NS - cpu_ns - 1000
        step_end = int(plan.seg_end[s, spec.collectives_per_step - 1, rank]) + 1000
        add({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{FIRST_STEP + s}", "pid": cpu_pid,
             "tid": cpu_tid, "ts": _us(step_begin + skew), "dur": _us(step_end - step_begin),
             "args": {"External id": ext}})
        ext += 1
        for c in range(spec.collectives_per_step):
            g_ns = int(plan.seg_start[s, c, rank])
            kinds = plan.slot_kernel_kinds[c]
            durs = durations[c][s].tolist()
            for i, d in enumerate(durs):
                kname, op, _ = _COMPUTE_KERNELS[kinds[i]]
                op_start = g_ns - LAUNCH_LEAD_NS - cpu_ns
                add({"ph": "X", "cat": "cpu_op", "name": op, "pid": cpu_pid, "tid": cpu_tid,
                     "ts": _us(op_start + skew), "dur": _us(cpu_ns),
                     "args": {"External id": ext, "Record function id": ext, "Ev Idx": ext}})
                launch(op_start, ext, corr)
                add({"ph": "X", "cat": "kernel", "name": kname, "pid": device, "tid": COMPUTE_STREAM,
                     "ts": _us(g_ns + skew), "dur": _us(d),
                     "args": {"External id": ext, "queued": 0, "device": device, "context": 1,
                              "stream": COMPUTE_STREAM, "correlation": corr, "registers per thread": 128,
                              "shared memory": 49152, "blocks per SM": 1.0, "warps per SM": 8.0,
                              "grid": [132, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 12}})
                add({"ph": "f", "id": corr, "pid": device, "tid": COMPUTE_STREAM, "ts": _us(g_ns + skew),
                     "cat": "ac2g", "name": "ac2g", "bp": "e"})
                g_ns += d
                corr += 1
                ext += 1
            arrival = int(plan.arrival[s, c, rank])
            assert g_ns == arrival
            gi = int(plan.group_of[c % plan.partitions, rank])
            if gi < 0:
                continue
            coll, annotation, kernel, ratio = _collective(c)
            size = len(plan.groups[gi].ranks)
            n_in = plan.nelems[c]
            n_out = n_in * size if ratio == "g" else max(1, n_in // size) if ratio == "1/g" else n_in
            cargs = {"Collective name": coll, "In msg nelems": n_in, "Out msg nelems": n_out, "dtype": "BFloat16",
                     "In split size": "[]", "Out split size": "[]", **group_args[gi]}
            op_start = arrival - LAUNCH_LEAD_NS - cpu_ns
            add({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": cpu_pid, "tid": cpu_tid,
                 "ts": _us(op_start + skew), "dur": _us(cpu_ns),
                 "args": {"External id": ext, "Record function id": ext, "Ev Idx": ext, **cargs}})
            add({"ph": "X", "cat": "user_annotation", "name": annotation, "pid": cpu_pid, "tid": cpu_tid,
                 "ts": _us(op_start + cpu_ns // 10 + skew), "dur": _us((cpu_ns * 8) // 10),
                 "args": {"External id": ext + 1, "Record function id": ext + 1, "Ev Idx": ext + 1}})
            launch(op_start, ext, corr)
            end = int(plan.seg_end[s, c, rank])
            sid = NCCL_STREAM_BASE + plan.groups[gi].partition
            add({"ph": "X", "cat": "kernel", "name": kernel, "pid": device, "tid": sid, "ts": _us(arrival + skew),
                 "dur": _us(end - arrival),
                 "args": {"External id": ext, "queued": 0, "device": device, "context": 1, "stream": sid,
                          "correlation": corr, "registers per thread": 96, "shared memory": 87568,
                          "blocks per SM": 0.06, "warps per SM": 1.0, "grid": [8, 1, 1], "block": [512, 1, 1],
                          "est. achieved occupancy %": 0, **cargs}})
            add({"ph": "f", "id": corr, "pid": device, "tid": sid, "ts": _us(arrival + skew), "cat": "ac2g",
                 "name": "ac2g", "bp": "e"})
            corr += 1
            ext += 2

    first = int(plan.seg_start[0, 0, rank]) - 100_000 + skew
    last = int(plan.seg_end[spec.steps - 1, spec.collectives_per_step - 1, rank]) + 100_000 + skew
    meta: list[dict[str, Any]] = []
    for pid, name, label, sort in ((cpu_pid, "python3.11", "CPU", cpu_pid), (device, "python3.11", f"GPU {device}",
                                                                             16777216 + device)):
        meta += [{"name": "process_name", "ph": "M", "ts": _us(first), "pid": pid, "tid": 0, "args": {"name": name}},
                 {"name": "process_labels", "ph": "M", "ts": _us(first), "pid": pid, "tid": 0,
                  "args": {"labels": label}},
                 {"name": "process_sort_index", "ph": "M", "ts": _us(first), "pid": pid, "tid": 0,
                  "args": {"sort_index": sort}}]
    meta += [{"name": "thread_name", "ph": "M", "ts": _us(first), "pid": device, "tid": COMPUTE_STREAM,
              "args": {"name": f"stream {COMPUTE_STREAM} "}},
             {"name": "thread_name", "ph": "M", "ts": _us(first), "pid": cpu_pid, "tid": cpu_tid,
              "args": {"name": f"thread {cpu_tid} (pt_main_thread)"}}]
    tail = [{"ph": "X", "cat": "Trace", "ts": _us(first), "dur": _us(last - first), "pid": "Spans",
             "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": _us(last)}]
    pg_config = [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl", "pg_size": len(g.ranks),
                  "ranks": g.ranks} for g in plan.groups]
    if not any(g.name == "0" for g in plan.groups):
        pg_config.insert(0, {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                             "pg_size": spec.ranks, "ranks": list(range(spec.ranks))})
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": device, **_DEVICE_PROPERTIES}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": spec.ranks, "pg_count": len(pg_config),
                            "pg_config": pg_config, "nccl_version": "2.21.5"},
        "record_shapes": 0,
        "traceEvents": meta + events + tail,
        "traceName": f"rank-{rank}.pt.trace.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
    }


def _scaled_kernels(spec: SynthSpec) -> int:
    """kernels_per_step giving ~target_mb_per_rank MB of JSON for rank 0 (from two small probes)."""
    assert spec.target_mb_per_rank is not None
    slots = spec.collectives_per_step
    k1, k2 = slots * 4, slots * 16
    sizes = []
    for k in (k1, k2):
        probe = replace(spec, kernels_per_step=k, target_mb_per_rank=None)
        sizes.append(len(orjson.dumps(_rank_document(_make_plan(probe), 0))))
    per_kernel = (sizes[1] - sizes[0]) / (k2 - k1)
    fixed = sizes[0] - per_kernel * k1
    want = (spec.target_mb_per_rank * 1e6 - fixed) / per_kernel
    return max(slots, round(want))


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
    parser = argparse.ArgumentParser(prog="python -m perftracker.synth",
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
        print(f"perftracker.synth: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(truth.files)} rank traces to {args.out}: {truth.events_complete:,} complete events, "
          f"{truth.bytes_json / 1e6:.1f} MB of JSON ({truth.bytes_json / 1e6 / max(1, len(truth.files)):.2f} MB per "
          f"rank), {truth.kernels_per_step} kernels per step; ground truth in {args.out / GROUND_TRUTH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
