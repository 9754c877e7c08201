"""The synthetic job model behind `benchmarks/synth.py`: the spec, the per-rank plan of a step's kernels
and collectives in true time, and the Kineto document each rank writes.

All times are whole nanoseconds; a collective ends at the same true time on every member of its group,
and each rank's clock skew is added only when its document is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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
    step_jitter: float = 0.0  # std of a per-(rank, step) factor on all its kernels: a slow step is slow throughout
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
    factor = 1.0 + spec.step_jitter * _rank_rng(spec.seed, 4, rank).standard_normal((spec.steps, 1))
    for c, n in enumerate(plan.slot_kernels):
        noise = rng.normal(0.0, plan.sigma_ns[c], size=(spec.steps, n))
        dur = np.maximum(np.rint((plan.base_ns[c][None, :] + noise) * factor), plan.kmin_ns).astype(np.int64)
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
    plan = _Plan(spec, groups, partitions, slot_kernels, kinds, base, sigma, kmin, cpu_ns, nelems, skew,
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


