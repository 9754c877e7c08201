"""The per-device table of `perftracker sanity` (`device_rows`): one row per rank, the worst nodes first."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from perftracker.analyzers.findings import Severity
from perftracker.analyzers.sanity.results import DEVICE_FIGURES, SanityResults

FIGURE_LABELS = {
    "gemm_fp32_tflops": "GEMM FP32 TFLOPS", "gemm_tf32_tflops": "GEMM TF32 TFLOPS",
    "gemm_bf16_tflops": "GEMM BF16 TFLOPS", "gemm_fp16_tflops": "GEMM FP16 TFLOPS",
    "gemm_fp8_tflops": "GEMM FP8 TFLOPS", "copy_gbps": "copy GB/s", "h2d_gbps": "H2D GB/s", "d2h_gbps": "D2H GB/s",
    "best_pair_gbps": "best pair GB/s", "allreduce_busbw_gbps": "all-reduce busbw GB/s",
    "allgather_busbw_gbps": "all-gather busbw GB/s", "allreduce_lat_us": "all-reduce latency us",
    "node_allreduce_busbw_gbps": "in-node all-reduce busbw GB/s",
    "node_allgather_busbw_gbps": "in-node all-gather busbw GB/s", "node_allreduce_lat_us": "in-node latency us",
    "inter_allreduce_busbw_gbps": "between-node all-reduce busbw GB/s",
    "inter_allgather_busbw_gbps": "between-node all-gather busbw GB/s",
    "inter_allreduce_lat_us": "between-node latency us",
}
_ORDER = {"unreachable": 0, "critical": 1, "warning": 2, "ok": 3}


def best_pair(pairs: list[dict[str, Any]]) -> dict[str, float]:
    """host -> the best GB/s of the measured pairs it is in."""
    best: dict[str, float] = {}
    for p in pairs:
        if p.get("gbps") is not None:
            for host in (p["a"], p["b"]):
                best[host] = max(best.get(host, 0.0), float(p["gbps"]))
    return best


def device_rows(results: SanityResults, status: Mapping[str, Severity]) -> list[dict[str, Any]]:
    """See docs/internals/analyzers.md."""
    records = [results.records[r] for r in sorted(results.records)]
    best = best_pair([p for r in records for p in r.get("pairs", [])])
    reported = {r["host"] for r in records}
    first = next((f for f in DEVICE_FIGURES if any(f in r.get("figures", {}) for r in records)), "")
    values = [float(r["figures"][first]) for r in records if first in r.get("figures", {})]
    median = statistics.median(values) if values else 0.0
    rows: list[dict[str, Any]] = []
    for r in records:
        sev = status.get(r["host"])
        row: dict[str, Any] = {"host": r["host"], "rank": r["rank"], "device": r["device"],
                               "status": sev.label if sev is not None and sev > Severity.INFO else "ok"}
        for name, value in r.get("figures", {}).items():
            row[name] = round(float(value), 4)
        if r["host"] in best:
            row["best_pair_gbps"] = round(best[r["host"]], 4)
        row["_share"] = float(r["figures"].get(first, 0.0)) / median if median > 0 else 1.0
        rows.append(row)
    for host in dict.fromkeys(results.hosts):
        if host not in reported:
            rows.append({"host": host, "rank": results.hosts.index(host), "device": "", "status": "unreachable",
                         "_share": 0.0})
    rows.sort(key=lambda row: (_ORDER.get(row["status"], 4), row["_share"], row["rank"]))
    for row in rows:
        del row["_share"]
    return rows
