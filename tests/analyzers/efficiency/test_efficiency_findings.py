"""Efficiency findings on synthetic traces with exact ground truth (one per finding kind: misaligned GEMM dims, FP32
GEMMs without TF32, unfused attention), and the shape models against hand-computed FLOPs. Synthetic traces give the
exact answer; the real-trace proof is tests/analyzers/efficiency/test_efficiency_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.analyzer import analyze_efficiency
from perftracker.analyzers.efficiency.devices import device_table
from perftracker.analyzers.efficiency.models import model_op
from perftracker.analyzers.efficiency.shapes import parse_args
from perftracker.analyzers.efficiency.tables import op_efficiency_view, step_mfu_view
from perftracker.analyzers.findings import Finding
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.errors import InputError
from tests.tracegen import TraceBuilder

H100_BF16, H100_FP32, H100_BW = 989.4, 67.0, 3.35  # devices.toml's H100 SXM figures (TFLOPS, TB/s)


class Ops(TraceBuilder):
    """A trace of framework ops, each launching one kernel; the GPU runs them back to back."""

    def __init__(self) -> None:
        super().__init__(rank=0, world_size=1)
        self.t = 100.0
        self.gpu = 1000.0

    def op(self, name: str, dims: list[Any], types: list[str], concrete: list[str], kernel_us: float,
           children: list[tuple[str, float]] | None = None) -> Ops:
        """`name` with those arguments; its kernel(s) (`children`: (kernel name, us) launched from child ops)."""
        kernels = children or [(f"{name}_kernel", kernel_us)]
        dur = 10.0 * len(kernels) + 10
        self.cpu(name, self.t, dur, **{"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete})
        for i, (kernel, us) in enumerate(kernels):
            if children:
                self.cpu(f"aten::child{i}", self.t + 2 + 10 * i, 8)
            self.kernel(kernel, self.gpu, us, launch_ts=self.t + 3 + 10 * i)
            self.gpu += us + 1
        self.t += dur + 2
        return self

    def save(self, tmp: Path, device: str = "NVIDIA H100 80GB HBM3") -> Path:
        self.step(1, 50.0, max(self.t, self.gpu) + 10)
        doc = self.document()
        doc["deviceProperties"] = [{"id": 0, "name": device}]
        path = tmp / "rank0.json"
        path.write_text(json.dumps(doc))
        return path


def findings_of(path: Path) -> dict[str, Finding]:
    return {f.key: f for f in analyze_efficiency(Analysis(load_path(path, LoadOptions(cache_dir=None))))}


def mm(ops: Ops, m: int, n: int, k: int, us: float, dtype: str = "c10::BFloat16") -> None:
    ops.op("aten::mm", [[m, k], [k, n]], [dtype, dtype], ["", ""], us)


def test_misaligned_gemm_dims_ground_truth(tmp_path: Path) -> None:
    # GIVEN 4 aligned bf16 GEMMs at exactly 60% of the H100 roof and 4 with K = 4095 at 20% of it
    ops = Ops()
    flops_aligned, flops_odd = 2.0 * 4096**3, 2.0 * 4096 * 4096 * 4095
    aligned_us = flops_aligned / (H100_BF16 * 1e6) / 0.6
    odd_us = flops_odd / (H100_BF16 * 1e6) / 0.2
    for _ in range(4):
        mm(ops, 4096, 4096, 4096, round(aligned_us, 3))
        mm(ops, 4096, 4096, 4095, round(odd_us, 3))
    # WHEN analyzed
    finding = findings_of(ops.save(tmp_path))["misaligned:bf16"]
    # THEN it names the shape, the 60% reference and the time saved at that reference
    roof_ns = flops_odd / H100_BF16 / 1e3
    gpu_ns = round(odd_us * 1000)
    assert finding.evidence["reference_pct_of_roof"] == pytest.approx(60.0, abs=0.05)
    assert finding.evidence["shapes"][0]["shape"] == "M=4096,N=4096,K=4095"
    reference = 100.0 * (flops_aligned / H100_BF16 / 1e3) / round(aligned_us * 1000)  # % of roof, as rounded to ns
    expected_saved = 4 * (gpu_ns - roof_ns / (reference / 100.0))
    assert finding.cost.seconds_per_step == pytest.approx(expected_saved / 1e9, rel=1e-3)
    assert finding.severity.label == "warning"


def test_aligned_gemms_have_no_misalignment_finding(tmp_path: Path) -> None:
    # GIVEN only aligned GEMMs, one of them slow; THEN no misalignment finding (slow alone is not misaligned)
    ops = Ops()
    mm(ops, 4096, 4096, 4096, 300.0)
    mm(ops, 4096, 4096, 4096, 1000.0)
    assert not any(k.startswith("misaligned") for k in findings_of(ops.save(tmp_path)))


def test_fp32_gemm_in_bf16_run_ground_truth(tmp_path: Path) -> None:
    # GIVEN bf16 GEMMs at a known rate and one FP32 GEMM slower than the FP32 peak (TF32 off)
    ops = Ops()
    flops = 2.0 * 4096**3
    for _ in range(3):
        mm(ops, 4096, 4096, 4096, 250.0)
    mm(ops, 2048, 2048, 2048, 400.0, dtype="float")
    # WHEN analyzed
    finding = findings_of(ops.save(tmp_path))["fp32_gemms"]
    # THEN the cost is its time minus its FLOPs at the bf16 GEMMs' rate
    rate = 3 * flops / (3 * 250_000)  # FLOPs per ns
    expected = 400_000 - 2.0 * 2048**3 / rate
    assert finding.evidence["saved_ms_total"] == pytest.approx(expected / 1e6, abs=1e-3)
    assert finding.cost.seconds_per_step == pytest.approx(expected / 1e9, rel=1e-6)


def test_fp32_gemm_faster_than_fp32_peak_is_tf32_and_not_flagged(tmp_path: Path) -> None:
    # GIVEN an FP32 GEMM at 150 TFLOPS (over the H100's 67 FP32 TFLOPS: TF32 units ran it)
    ops = Ops()
    for _ in range(3):
        mm(ops, 4096, 4096, 4096, 250.0)
    mm(ops, 2048, 2048, 2048, 2.0 * 2048**3 / 150e6, dtype="float")
    assert "fp32_gemms" not in findings_of(ops.save(tmp_path))


def test_unfused_attention_ground_truth(tmp_path: Path) -> None:
    # GIVEN SDPA that ran the math path (QK^T, softmax, PV kernels) on B=2, H=16, S=1024, D=64 bf16
    ops = Ops()
    dims = [[2, 16, 1024, 64]] * 3 + [[], [], [], [], []]
    types = ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]
    concrete = ["", "", "", "", "0.", "False", "", "False"]
    ops.op("aten::scaled_dot_product_attention", dims, types, concrete, 0,
           children=[("bmm_qk", 300.0), ("softmax", 200.0), ("bmm_pv", 300.0)])
    next(e for e in ops.events if e["name"] == "aten::child0")["name"] = "aten::_scaled_dot_product_attention_math"
    # WHEN analyzed
    finding = findings_of(ops.save(tmp_path))["unfused_attention"]
    # THEN its FLOPs (4*B*H*S*S*D) at 35% of the H100's BF16 peak are the reference
    flops = 4.0 * 2 * 16 * 1024 * 1024 * 64
    expected = 800_000 - flops / (0.35 * H100_BF16 * 1e3)
    assert finding.evidence["saved_ms_total"] == pytest.approx(expected / 1e6, abs=1e-3)
    assert finding.severity.label == "warning"


@pytest.mark.parametrize(("name", "dims", "types", "concrete", "flops"), [
    ("aten::addmm", [[64], [128, 256], [256, 64], [], []], ["c10::Half"] * 3 + ["Scalar"] * 2, [], 2.0 * 128 * 64 * 256),
    ("aten::baddbmm", [[4, 8, 16], [4, 8, 32], [4, 32, 16], [], []], ["float"] * 3, [], 2.0 * 4 * 8 * 16 * 32),
    ("aten::matmul", [[3, 5, 7], [7]], ["float", "float"], [], 2.0 * 15 * 7),
    ("aten::matmul", [[2, 1, 5, 7], [3, 7, 4]], ["float", "float"], [], 2.0 * 6 * 5 * 4 * 7),
    ("aten::_scaled_mm", [[128, 256], [256, 512], [], [], [], []], ["c10::Float8_e4m3fn"] * 2 + ["float"] * 2, [],
     2.0 * 128 * 512 * 256),
    ("aten::_grouped_mm", [[1000, 64], [8, 64, 32], [8]], ["c10::BFloat16"] * 2 + ["int"], [], 2.0 * 1000 * 64 * 32),
    ("aten::convolution", [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
     ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar"],
     ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"], 2.0 * 8 * 16 * 32 * 32 * 3 * 9),
    ("aten::_flash_attention_backward", [[2, 128, 4, 64]] * 6, ["c10::BFloat16"] * 6,
     ["", "", "", "", "", "", "", "", "128", "128", "0.", "True"], 2.5 * 4.0 * 2 * 4 * 128 * 128 * 64 / 2),
])
def test_shape_models_hand_computed(name: str, dims: list[Any], types: list[str], concrete: list[str],
                                    flops: float) -> None:
    # GIVEN an op's arguments as a trace writes them; THEN its model's FLOPs are the hand-computed figure
    args = parse_args(json.dumps(dims), json.dumps(types), json.dumps(concrete))
    assert args is not None
    model = model_op(name, args)
    assert model is not None and model.flops == flops


def test_ops_without_a_fitting_signature_get_no_model() -> None:
    # GIVEN mismatched GEMM dims, a cut argument list and an op nobody models; THEN no model, never a guess
    assert model_op("aten::mm", parse_args("[[4,5],[6,7]]", '["float","float"]', "")) is None  # type: ignore[arg-type]
    assert parse_args('[[4,5],[6', '["float"]', "") is None
    assert model_op("my::custom_kernel", parse_args("[[4]]", '["float"]', "")) is None  # type: ignore[arg-type]


def test_user_device_file_comes_first_and_bad_files_are_named(tmp_path: Path) -> None:
    # GIVEN a user file that overrides the H100's figures and one with a figure that is not a number
    good = tmp_path / "mine.toml"
    good.write_text('[[device]]\nname = "my H100"\npatterns = ["H100"]\nmemory_tbps = 3.0\nbf16 = 900\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('[[device]]\nname = "x"\npatterns = ["x"]\nmemory_tbps = "fast"\n')
    # THEN the user's device wins, and the bad file is an InputError naming it
    device = device_table((good,)).match("NVIDIA H100 80GB HBM3")
    assert device is not None and device.name == "my H100" and device.peak("bf16") == 900.0
    with pytest.raises(InputError, match="bad.toml|memory_tbps"):
        device_table((bad,))


def test_a_trace_without_shapes_has_no_mfu_and_lists_its_time_as_no_model(tmp_path: Path) -> None:
    # GIVEN a trace recorded without record_shapes (an aten::mm with no Input Dims, one kernel of 300 us)
    ops = Ops()
    ops.cpu("aten::mm", 100.0, 20.0)
    ops.kernel("gemm_kernel", 1000.0, 300.0, launch_ts=105.0)
    run = Analysis(load_path(ops.save(tmp_path), LoadOptions(cache_dir=None)))
    # THEN no MFU (rather than a false 0%), no finding, and its GPU time is "no model" under the op's name
    table = run.view(op_efficiency_view)
    assert run.view(step_mfu_view).empty and analyze_efficiency(run) == []
    assert table[["op", "family", "gpu_ns"]].to_dict("records") == [
        {"op": "aten::mm", "family": "no model", "gpu_ns": 300_000}]


def test_roofline_bounds_and_percentages_exact() -> None:
    # GIVEN an H100 and four op groups (exact figures: 1e12 FLOPs in 2 ms is 500 TFLOPS): a bf16 GEMM, an elementwise op at half the bandwidth, one faster than the
    # memory can be (cache), and an FP32 GEMM faster than the FP32 units (TF32)
    import pandas as pd

    from perftracker.analyzers.efficiency.devices import roofline

    h100 = device_table().match("NVIDIA H100 80GB HBM3")
    frame = pd.DataFrame({"flops": [1e12, 0.0, 0.0, 1e12], "bytes": [1e9, 1.675e9, 1e9, 1e9],
                          "gpu_ns": [2_000_000, 1_000_000, 100_000, 10_000_000], "dtype": ["bf16", "bf16", "fp32", "fp32"]})
    out = roofline(frame, h100)
    # THEN each is measured against the right roof
    assert list(out["bound"]) == ["compute", "memory", "cache", "compute"]
    assert out["pct_of_peak"].iloc[0] == pytest.approx(100 * 500 / H100_BF16)  # 500 TFLOPS of 989.4
    assert out["pct_of_peak"].iloc[1] == pytest.approx(100 * 1.675 / H100_BW)  # 1.675 TB/s of 3.35
    assert out["pct_of_peak"].isna().iloc[2] and out["lost_ns"].iloc[2] == 0
    # 100 TFLOPS of FP32 is more than the 67 FP32 units give: TF32 ran it, and its peak (494.7) is the roof
    assert out["peak_tflops"].iloc[3] == 494.7 and out["tf32"].iloc[3] and H100_FP32 < 100
