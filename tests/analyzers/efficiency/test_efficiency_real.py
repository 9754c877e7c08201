"""Efficiency figures on real public traces with op shapes (tests/fixtures/tracelens: H100, MI300X, B200) and on the
shared HTA corpus: GEMM FLOPs equal 2*M*N*K*batch computed here from the raw JSON, every device is in the table,
MFU is computed, and no percentage of peak passes 100."""

from __future__ import annotations

import functools
import gzip
import json
import math
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.analyzer import analyze_efficiency
from perftracker.analyzers.efficiency.instances import op_instances_view
from perftracker.analyzers.efficiency.tables import device_peaks_view, op_efficiency_view, step_mfu_view
from perftracker.collectors.loading import LoadOptions, load_path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tracelens"
TRACES = sorted(FIXTURES.glob("*.json.gz"))


def expected_gemm_flops(name: str, dims: list[list[int]]) -> float | None:
    """2*M*N*K*batch of a GEMM op, from its Input Dims, written out independently of perftracker's models."""
    if name == "aten::linear":
        x, w = dims[0], dims[1]
        return 2.0 * math.prod(x[:-1]) * w[0] * w[1] if len(w) == 2 and x and x[-1] == w[1] else None
    if name in ("aten::addmm", "aten::baddbmm"):
        dims = dims[1:]
    if name in ("aten::mm", "aten::addmm"):
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * n * k
    if name in ("aten::bmm", "aten::baddbmm"):
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2.0 * b * m * n * k
    if name == "aten::matmul":
        a, b = dims[0], dims[1]
        if len(b) == 2:
            return 2.0 * math.prod(a[:-1]) * b[0] * b[1]
        batch = math.prod(max(x, y) for x, y in zip(a[:-2], b[:-2]))
        return 2.0 * batch * a[-2] * a[-1] * b[-1]
    return None


def raw_gemms(path: Path) -> dict[tuple[str, int], float]:
    """(op name, start in ns) -> expected FLOPs of every GEMM cpu_op in the raw trace."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    found = {}
    for e in doc["traceEvents"]:
        if e.get("cat") != "cpu_op" or "Input Dims" not in e.get("args", {}):
            continue
        flops = expected_gemm_flops(e["name"], e["args"]["Input Dims"])
        if flops is not None:
            found[(e["name"], round(e["ts"] * 1000))] = flops
    return found


@functools.cache
def analyzed(path: Path) -> Analysis:
    """One Analysis per fixture trace for the whole module (analyses do not change their Store)."""
    return Analysis(load_path(path, LoadOptions(cache_dir=None)))


@pytest.fixture(scope="module", params=TRACES, ids=[p.name for p in TRACES])
def analysis(request: pytest.FixtureRequest) -> tuple[Path, Analysis]:
    path: Path = request.param
    return path, analyzed(path)


def test_gemm_flops_equal_2mnk_batch_per_instance(analysis: tuple[Path, Analysis]) -> None:
    # GIVEN a real trace with shapes; WHEN its GEMM instances are modelled
    path, run = analysis
    inst = run.view(op_instances_view)
    gemms = inst[inst["family"] == "gemm"]
    expected = raw_gemms(path)
    # THEN every GEMM instance's FLOPs are exactly 2*M*N*K*batch as computed from the raw JSON
    assert len(gemms) > 0
    for op, start, flops in zip(gemms["op"], gemms["start_ns"], gemms["flops"]):
        assert flops == expected[(op, int(start))], (op, start)


def test_devices_known_mfu_computed_and_no_pct_above_100(analysis: tuple[Path, Analysis]) -> None:
    # GIVEN a real trace; WHEN its efficiency tables are computed
    _, run = analysis
    peaks = run.view(device_peaks_view)
    table = run.view(op_efficiency_view)
    mfu = run.view(step_mfu_view)
    # THEN its device is in the table, MFU is a fraction in (0, 1], and no op passes 100% of its roof
    assert peaks["known"].all(), peaks
    assert len(mfu) >= 1 and ((mfu["mfu"] > 0) & (mfu["mfu"] <= 1)).all(), mfu
    assert table["pct_of_peak"].dropna().le(100).all()
    assert (table["family"] == "no model").any()  # the GPU time no model covers is listed, not dropped


def test_causal_attention_halves_flops_on_qwen() -> None:
    # GIVEN the Qwen traces (causal SDPA, is_causal=True in the op's arguments: 16 x 16 heads, 559 tokens, D 64)
    for path in FIXTURES.glob("*Qwen*.json.gz"):
        inst = analyzed(path).view(op_instances_view)
        attention = inst[inst["family"] == "attention"]
        # THEN each attention instance counts 4*B*H*S*S*D / 2
        assert len(attention) == 24 and attention["causal"].all()
        assert (attention["flops"] == 4.0 * 16 * 16 * 559 * 559 * 64 / 2).all()


def test_a_finding_fires_on_a_real_trace() -> None:
    # GIVEN eager Qwen inference on H100 (RMSNorm, rotary and SwiGLU as separate elementwise kernels)
    run = analyzed(FIXTURES / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    findings = {f.key: f for f in analyze_efficiency(run)}
    # THEN the fusible chains are named, with a cost, and no misaligned or unfused-attention finding (all dims are
    # multiples of 8 and attention ran the flash kernel)
    assert findings["elementwise_chains"].severity.label == "warning"
    assert findings["elementwise_chains"].cost.seconds_per_step > 0
    assert not any(k.startswith("misaligned") for k in findings) and "unfused_attention" not in findings
