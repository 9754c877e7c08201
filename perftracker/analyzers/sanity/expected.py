"""Expected figures per device for `perftracker sanity` (`expected_for`): the vendor's peak, with its source."""

from __future__ import annotations

_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5), nvidia.com/en-us/data-center/h100"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/h200"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), nvidia.com/en-us/data-center/a100"

PEAKS: dict[str, tuple[dict[str, float], str]] = {
    "H200": ({"gemm_bf16_tflops": 989.0, "gemm_fp16_tflops": 989.0, "gemm_tf32_tflops": 494.0,
              "gemm_fp8_tflops": 1979.0, "copy_gbps": 4800.0}, _H200),
    "H100": ({"gemm_bf16_tflops": 989.0, "gemm_fp16_tflops": 989.0, "gemm_tf32_tflops": 494.0,
              "gemm_fp8_tflops": 1979.0, "copy_gbps": 3350.0}, _H100),
    "A100": ({"gemm_bf16_tflops": 312.0, "gemm_fp16_tflops": 312.0, "gemm_tf32_tflops": 156.0,
              "copy_gbps": 2039.0}, _A100),
}


def expected_for(device_name: str, figure: str) -> tuple[float, str] | None:
    """(peak, source) for `figure` on the device named `device_name`, or None."""
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in device_name:
            peaks, source = PEAKS[key]
            return (peaks[figure], source) if figure in peaks else None
    return None
