"""The gathered results of `perftracker sanity` (what rank 0 writes as OUT/sanity.json and judges), JSON-ready."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEVICE_FIGURES = ("gemm_fp32_tflops", "gemm_tf32_tflops", "gemm_bf16_tflops", "gemm_fp16_tflops", "gemm_fp8_tflops",
                  "copy_gbps", "h2d_gbps", "d2h_gbps")


@dataclass
class SanityResults:
    """What rank 0 gathered: `records` by rank (collectors/sanity/measure.py's schema), `hosts` by rank."""

    hosts: list[str]
    records: dict[int, dict[str, Any]]
    time_box_s: float = 0.0
    elapsed_s: float = 0.0
    synthetic: str = ""  # why the figures are synthetic, when they are

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": self.hosts, "records": {str(r): v for r, v in sorted(self.records.items())},
                "time_box_s": self.time_box_s, "elapsed_s": self.elapsed_s, "synthetic": self.synthetic}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SanityResults:
        return cls(hosts=[str(h) for h in raw["hosts"]], records={int(r): dict(v) for r, v in raw["records"].items()},
                   time_box_s=float(raw.get("time_box_s", 0.0)), elapsed_s=float(raw.get("elapsed_s", 0.0)),
                   synthetic=str(raw.get("synthetic", "")))
