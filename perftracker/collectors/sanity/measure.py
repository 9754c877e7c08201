"""One rank's whole `perftracker sanity` measurement, within the time box.

Promise: `plan_for(time_box_s, device)` splits the box between the phases, each with a deadline; `new_record`
is the JSON-ready record that `measure(...)` fills in place as it goes; `comm` errors are recorded, never
raised. `device_figures(device, seconds)` measures GEMM throughput, device memory copy and host<->device bandwidth
as the median rate over short windows, the best of `repeats` (a figure that cannot be measured is left out with
its reason in `errors`; only the CPU path runs in CI). Phases and record fields: docs/internals/collectors.md.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from perftracker.collectors.sanity import DEFAULT_S, QUICK_S, join_s  # noqa: F401 - re-exported
from perftracker.collectors.sanity.comm import Comm
from perftracker.collectors.sanity.launch import Launch
from perftracker.collectors.sanity.node import cpu_during, cpu_sample

REPEATS = 3
# shares of the box: the phases' deadlines; the watchdog's end of measuring; the latest a non-writer stays
DEVICE_END, COLL_END, PAIRS_END, GATHER_END, WATCHDOG_END, HARD_END = 0.3, 0.55, 0.75, 0.85, 0.95, 1.2
TEST_FAIL_VAR = "PERFTRACKER_SANITY_TEST_FAIL"  # "<rank>:<figure>,...": that rank's figure fails (tests only)


def injected_failures(env: Mapping[str, str], rank: int) -> list[str]:
    """The figures the test hook $PERFTRACKER_SANITY_TEST_FAIL makes fail on `rank` (a device that errors, on
    demand: tests of what follows a failed check)."""
    items = (item.strip().partition(":") for item in env.get(TEST_FAIL_VAR, "").split(","))
    return [figure.strip() for who, _, figure in items if who.strip().isdigit() and int(who) == rank and figure.strip()]


@dataclass(frozen=True)
class Plan:
    """How the time box is spent (seconds, bytes, counts)."""

    time_box_s: float
    join_s: float
    device_s: float
    timeout_s: float
    coll_bytes: int
    coll_iters: int
    latency_iters: int
    pair_bytes: int
    pair_reps: int
    pair_tours: int


def plan_for(time_box_s: float, device: torch.device) -> Plan:
    """The phases' shares of `time_box_s` (see the module docstring)."""
    gpu = device.type == "cuda"
    short = time_box_s <= 30
    return Plan(time_box_s=time_box_s, join_s=join_s(time_box_s), device_s=0.2 * time_box_s, timeout_s=max(8.0, 0.2 * time_box_s),
                coll_bytes=(256 << 20) if gpu else (1 << 20) if short else (4 << 20),
                coll_iters=5 if short else 20, latency_iters=20 if short else 100,
                pair_bytes=(64 << 20) if gpu else (1 << 20), pair_reps=4 if short else 10, pair_tours=3 if short else 5)


def device_for(local_rank: int) -> torch.device:
    """cuda:<local rank modulo the devices> when CUDA is present, else the CPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def new_record(launch: Launch, host: str, device: torch.device) -> dict[str, Any]:
    """This rank's record before anything is measured (see the module docstring)."""
    return {"rank": launch.rank, "local_rank": launch.local_rank, "host": host, "device": str(device),
            "device_name": "", "figures": {}, "repeats": {}, "errors": {}, "pairs": [], "cut": [], "cpu": {},
            "node": {}}


def measure(launch: Launch, plan: Plan, host: str, node: dict[str, Any], device: torch.device,
            started: float, record: dict[str, Any], comm: Comm | None) -> None:
    """Fill `record` (see the module docstring); `started` is time.monotonic() at the command's start and `comm`
    the joined group (None: alone, or the rendezvous failed)."""
    if comm is not None:
        record["joined_after_s"] = round(comm.joined_at - started, 3)
    t0 = comm.joined_at if comm is not None else started
    box = plan.time_box_s

    def sync() -> None:
        if comm is not None and "barrier" not in record["errors"]:  # a broken group: one timeout, not three
            why = comm.barrier()
            if why:
                record["errors"].setdefault("barrier", why)

    before = cpu_sample()
    figures = device_figures(str(device), plan.device_s, repeats=REPEATS, sync=sync)
    record["cpu"] = cpu_during(before, cpu_sample())
    record["device_name"] = figures.name
    record["figures"].update(figures.figures)
    record["repeats"].update({k: [round(v, 6) for v in vs] for k, vs in figures.repeats.items()})
    record["errors"].update(figures.errors)
    for figure in injected_failures(os.environ, launch.rank):
        record["figures"].pop(figure, None)
        record["errors"][figure] = f"RuntimeError: injected by {TEST_FAIL_VAR} (a test hook)"
    if comm is not None:
        for scope in ("", "node", "inter"):  # all ranks; within each node; between nodes (one rank each)
            if scope == "inter" and any(k.startswith(("allreduce", "allgather")) for k in record["errors"]):
                continue  # a peer is gone: the nodes' group would only wait out the timeout again
            if comm.barrier(scope):
                continue
            coll = comm.collectives(plan.coll_bytes, plan.coll_iters, plan.latency_iters, scope,
                                    deadline=t0 + COLL_END * box)
            record["figures"].update(coll.figures)
            record["errors"].update(coll.errors)
            record["cut"].extend(coll.cut)
        if not comm.barrier("inter" if "inter" in comm.groups else ""):
            pairs = comm.pairwise(plan.pair_bytes, plan.pair_reps, plan.pair_tours, deadline=t0 + PAIRS_END * box)
            record["pairs"] = [asdict(p) for p in pairs]
            cut = [f"{p.a}-{p.b}" for p in pairs if p.cut]
            if cut:
                record["cut"].append(f"node pairs not measured (time box): {', '.join(cut)}")
        if comm.hosts and comm.leaders() and launch.rank in comm.leaders():
            record["node"] = node
    else:
        record["node"] = node
    record["elapsed_s"] = round(time.monotonic() - t0, 3)


GEMM_N_CPU = 256
GEMM_N_GPU = 8192
COPY_BYTES_CPU = 32 << 20
COPY_BYTES_GPU = 1 << 30
H2D_BYTES = 256 << 20
WINDOW_S = 0.3


@dataclass
class DeviceFigures:
    """One device's figures (name -> value; TFLOPS or GB/s) and why any figure is missing."""

    device: str
    name: str
    figures: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    repeats: dict[str, list[float]] = field(default_factory=dict)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _window_rates(fn: Callable[[], object], amount: float, device: torch.device, seconds: float,
                  window: float = WINDOW_S, least: int = 3) -> list[float]:
    """`amount` per second of repeated calls of `fn`, in windows of about `window` s filling `seconds` (at least
    `least`), after one warm-up call. A window spans several scheduler periods, so a CPU quota or a throttled clock
    shows in it (the duration of one short call would hide it: it runs at full speed between throttled spells)."""
    fn()
    _sync(device)
    rates: list[float] = []
    end = time.perf_counter() + seconds
    while len(rates) < least or time.perf_counter() < end:
        t0 = time.perf_counter()
        calls = 0
        while True:
            fn()
            calls += 1
            if calls % 8 == 0 or device.type != "cuda":
                _sync(device)
                if time.perf_counter() - t0 >= window:
                    break
        rates.append(calls * amount / (time.perf_counter() - t0))
        if len(rates) >= 1000:
            break
    return rates


def gemm_dtypes(device: torch.device) -> list[str]:
    """The GEMM dtypes measured on `device`."""
    if device.type != "cuda":
        return ["fp32"]
    kinds = ["bf16", "fp16", "tf32"]
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) >= (8, 9) and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm"):
        kinds.append("fp8")
    return kinds


def _gemm_fn(kind: str, device: torch.device, n: int) -> Callable[[], None]:
    if kind == "fp8":
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=device)
        return lambda: None if torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16) is None else None
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[kind]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = kind == "tf32"
    return lambda: None if torch.mm(a, b, out=out) is None else None


def device_figures(device_name: str, seconds: float, repeats: int = 1,
                   sync: Callable[[], object] | None = None) -> DeviceFigures:
    """Measure `device_name` for about `seconds`; see the module docstring."""
    device = torch.device(device_name)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result = DeviceFigures(device=device_name, name=label)
    kinds = gemm_dtypes(device)
    slices = len(kinds) + (3 if device.type == "cuda" else 1)
    share = seconds / slices / max(1, repeats)
    least = 3 if repeats <= 1 else 2
    n = GEMM_N_GPU if device.type == "cuda" else GEMM_N_CPU
    size = COPY_BYTES_GPU if device.type == "cuda" else COPY_BYTES_CPU
    measures: list[tuple[str, Callable[[], Callable[[], None]], float]] = [
        (f"gemm_{kind}_tflops", functools.partial(_gemm_fn, kind, device, n), 2.0 * n**3 / 1e12) for kind in kinds]
    measures.append(("copy_gbps", functools.partial(_copy_fn, device, size), 2.0 * size / 1e9))
    made: dict[str, Callable[[], None]] = {}
    for _ in range(max(1, repeats)):
        if sync is not None:
            sync()
        for name, make, amount in measures:
            if name in result.errors:
                continue
            try:
                if name not in made:
                    made[name] = make()
                value = statistics.median(_window_rates(made[name], amount, device, share, least=least))
            except (RuntimeError, TypeError, ValueError) as exc:  # a dtype the build or device refuses
                result.errors[name] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            result.repeats.setdefault(name, []).append(value)
    if device.type == "cuda":
        _host_device(result, device, share * max(1, repeats))
    for name, values in result.repeats.items():
        result.figures.setdefault(name, max(values))
    return result


def _copy_fn(device: torch.device, size: int) -> Callable[[], None]:
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    src.fill_(1)
    return lambda: None if dst.copy_(src) is None else None


def _host_device(result: DeviceFigures, device: torch.device, share: float) -> None:
    try:
        host = torch.empty(H2D_BYTES, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(H2D_BYTES, dtype=torch.uint8, device=device)
        for name, dst, src in (("h2d_gbps", dev, host), ("d2h_gbps", host, dev)):
            result.figures[name] = statistics.median(_window_rates(
                functools.partial(dst.copy_, src, non_blocking=True), H2D_BYTES / 1e9, device, share))
    except RuntimeError as exc:
        result.errors["h2d_gbps"] = f"{type(exc).__name__}: {exc}"[:200]
