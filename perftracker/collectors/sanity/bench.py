"""Per-device figures for `perftracker sanity`: GEMM throughput, device memory copy and host<->device bandwidth.

Promise: `device_figures(device, seconds)` measures each figure as the median rate over short windows, the best
of `repeats`, every repeat kept; a figure that cannot be measured is left out with its reason in `errors`.
Only the CPU path runs in CI. Details: docs/internals/collectors.md.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

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


def _window_rates(fn: Callable[[], None], amount: float, device: torch.device, seconds: float,
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
        gb = H2D_BYTES / 1e9
        result.figures["h2d_gbps"] = statistics.median(_window_rates(
            lambda: None if dev.copy_(host, non_blocking=True) is None else None, gb, device, share))
        result.figures["d2h_gbps"] = statistics.median(_window_rates(
            lambda: None if host.copy_(dev, non_blocking=True) is None else None, gb, device, share))
    except RuntimeError as exc:
        result.errors["h2d_gbps"] = f"{type(exc).__name__}: {exc}"[:200]
