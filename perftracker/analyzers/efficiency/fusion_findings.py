"""Fusion findings: attention that ran unfused (SDPA's math path), and chains of memory-bound elementwise ops."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.efficiency.evidence import Basis, ranks_of
from perftracker.analyzers.findings import Finding, Kind, Severity
from perftracker.analyzers.thresholds import threshold, threshold_int

MEMORY_FAMILIES = ("elementwise", "norm", "reduction")


def unfused_attention(basis: Basis) -> list[Finding]:
    inst = basis.instances
    if inst.empty:
        return []
    attention = inst[inst["family"] == "attention"]
    math_rows = attention[attention["math_attention"] | (attention["op"] == "aten::_scaled_dot_product_attention_math")]
    if math_rows.empty:
        return []
    fused = attention.drop(math_rows.index)
    if len(fused) and fused["gpu_ns"].sum() > 0:
        rate = float(fused["flops"].sum()) / float(fused["gpu_ns"].sum())
        reference = f"this run's fused attention ({rate / 1e3:.1f} TFLOPS)"
    else:
        peaks = math_rows["peak_tflops"].to_numpy(np.float64)
        rate = float(np.nanmean(peaks)) * threshold("efficiency.fused_reference_pct") / 100.0 * 1e3 if np.isfinite(peaks).any() else np.nan
        reference = f"{threshold('efficiency.fused_reference_pct'):.0f}% of the device's dense peak"
    saved = float(np.maximum(math_rows["gpu_ns"] - math_rows["flops"] / rate, 0.0).sum()) if rate > 0 else 0.0
    severity = Severity.WARNING if basis.cost(saved).share_of_step >= threshold("efficiency.attention_warn_share") else Severity.INFO
    return [Finding(
        Kind.EFFICIENCY, severity, f"{len(math_rows)} attention call(s) ran SDPA's unfused math path "
              f"({math_rows['gpu_ns'].sum() / 1e6:.2f} ms of GPU time)",
        recommendation="Make a fused backend eligible: BF16/FP16 inputs, no arbitrary attn_mask (use is_causal), "
                       "head dim the kernels support; check with torch.nn.attention.sdpa_kernel(...) which backend "
                       f"refuses and why. Cost = their time minus their FLOPs at {reference}.",
        evidence={"instances": len(math_rows), "reference": reference, "saved_ms_total": round(saved / 1e6, 3),
                  "shapes": math_rows.groupby(["shape", "dtype"]).size().rename("count").reset_index()
                  .head(8).to_dict("records")},
        cost=basis.cost(saved), key="unfused_attention", confidence=0.9, ranks=ranks_of(math_rows))]


def _chains(inst: pd.DataFrame) -> pd.DataFrame:
    """One row per chain of consecutive memory-bound instances on a rank window: length, gpu_ns, bytes, max_bytes."""
    ordered = inst[inst["kernels"] > 0].sort_values(["rank", "window", "start_ns"])  # ops that ran on the GPU
    memory = ordered["family"].isin(MEMORY_FAMILIES).to_numpy()
    rank_change = (ordered[["rank", "window"]].diff().abs().sum(axis=1) > 0).to_numpy()
    breaks = ~memory | rank_change
    chain = np.cumsum(breaks)
    frame = ordered.assign(chain=chain)[memory]
    grouped = frame.groupby("chain").agg(length=("gpu_ns", "size"), gpu_ns=("gpu_ns", "sum"), bytes=("bytes", "sum"),
                                         max_bytes=("bytes", "max"), rank=("rank", "first"))
    return grouped[grouped["length"] >= threshold_int("efficiency.min_chain")]


def elementwise_chains(basis: Basis) -> list[Finding]:
    inst = basis.instances
    if inst.empty:
        return []
    chains = _chains(inst)
    chains = chains[(chains["gpu_ns"] > 0) & (chains["bytes"] > 0)]
    if chains.empty:
        return []
    saved_each = chains["gpu_ns"] * (1.0 - chains["max_bytes"] / chains["bytes"])
    saved = float(saved_each.clip(lower=0).sum())
    share = basis.cost(saved).share_of_step
    return [Finding(
        analyzer="efficiency", severity=Severity.WARNING if share >= threshold("efficiency.chain_warn_share") else Severity.INFO,
        title=f"{len(chains)} chain(s) of {threshold_int('efficiency.min_chain')}+ memory-bound ops back to back ({int(chains['length'].sum())} "
              f"kernels, {chains['gpu_ns'].sum() / 1e6:.2f} ms) that one fused kernel each would replace",
        recommendation="Compile the region (torch.compile, or a fused op such as a fused RMSNorm / rotary / SwiGLU "
                       "kernel): each op reads and writes device memory on its own. Cost = chain time minus one "
                       "kernel moving the largest op's bytes at the chain's achieved bandwidth.",
        evidence={"chains": len(chains), "kernels": int(chains["length"].sum()),
                  "longest_chain": int(chains["length"].max()), "saved_ms_total": round(saved / 1e6, 3)},
        cost=basis.cost(saved), key="elementwise_chains", confidence=0.6, ranks=ranks_of(chains))]
