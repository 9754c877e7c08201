"""The efficiency analyzer, `analyze_efficiency(analysis)`: compute findings from the op roofline (GEMMs the tensor
cores do not want, tiny launch-bound or FP32 GEMMs; unfused attention, chains of memory-bound ops), and what the
tables cannot say on their own (a device the device table does not know; the job log's own throughput figures judged
against the device). What they share (`basis_view`): the instances that count, their roofline figures, and a cost
per step."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.devices import Device, device_names, device_of_ranks, roofline
from perftracker.analyzers.efficiency.instances import op_instances_view
from perftracker.analyzers.efficiency.tables import step_mfu_view
from perftracker.analyzers.findings import Cost, Finding, Kind, Severity
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.traces import EfficiencyEvidence, ShapeRow

ALIGN = {"bf16": 8, "fp16": 8, "fp8": 16, "fp4": 32, "fp32": 4, "fp64": 2}
_SHAPE_KEYS = ["op", "shape", "dtype", "m", "n", "k"]


@dataclass(frozen=True)
class Basis:
    instances: pd.DataFrame  # modelled instances in periods, with the roofline columns
    periods: int
    mean_period_ns: float

    def cost(self, saved_ns: float) -> Cost:
        if self.periods <= 0 or not saved_ns > 0:
            return Cost()
        per = saved_ns / self.periods
        share = per / self.mean_period_ns if self.mean_period_ns > 0 else 0.0
        return Cost(seconds_per_step=per / 1e9, share_of_step=min(share, 1.0))


def ranks_of(frame: pd.DataFrame) -> tuple[int, ...]:
    """The ranks of `frame`'s rows (at most 64), for a finding's `ranks`."""
    return tuple(sorted({int(r) for r in frame["rank"].tolist()}))[:64] if "rank" in frame.columns else ()


def basis_view(analysis: Analysis) -> Basis:
    """The `Basis` of this analysis, computed once."""
    mfu = analysis.view(step_mfu_view)
    inst = analysis.view(op_instances_view)
    if len(mfu) and len(inst):
        keys = mfu[["rank", "window", "step"]].astype(np.int64)
        inst = inst.merge(keys, how="inner", on=["rank", "window", "step"])
        devices = device_of_ranks(analysis)
        by_device: dict[str, list[int]] = {}
        for rank, device in devices.items():
            by_device.setdefault(device.name if device is not None else "", []).append(rank)
        named = {d.name: d for d in devices.values() if d is not None}
        parts = [roofline(part, named.get(name)) for name, ranks in by_device.items()
                 if len(part := inst[inst["rank"].isin(ranks)])]
        inst = pd.concat(parts, ignore_index=True) if parts else inst
    return Basis(inst, len(mfu), float(mfu["step_ns"].mean()) if len(mfu) else float("nan"))


def _severity(basis: Basis, saved_ns: float, count: int, share: float = 0.0) -> Severity:
    """WARNING when the cost is at least `share` (default: the threshold efficiency.gemm_warn_share) of the
    mean step and the cause ran efficiency.gemm_min_count times or more."""
    enough = basis.cost(saved_ns).share_of_step >= (share or threshold("efficiency.gemm_warn_share"))
    return Severity.WARNING if enough and count >= threshold_int("efficiency.gemm_min_count") else Severity.INFO


def _gemms(basis: Basis) -> pd.DataFrame:
    inst = basis.instances
    return inst[inst["family"] == "gemm"] if len(inst) else inst


def misaligned_gemms(basis: Basis) -> list[Finding]:
    gemms = _gemms(basis)
    if gemms.empty:
        return []
    align = gemms["dtype"].map(ALIGN).fillna(1).astype(np.int64)
    odd = ((gemms["n"] % align) != 0) | ((gemms["k"] % align) != 0)
    findings = []
    for dtype, mine in gemms[odd].groupby("dtype"):
        known = gemms[~odd & (gemms["dtype"] == dtype)].dropna(subset=["pct_of_peak"])  # the aligned GEMMs' mean
        weights = known["flops"].to_numpy(np.float64)  # % of peak, weighted by FLOPs
        reference = float(np.average(known["pct_of_peak"], weights=weights)) if len(known) and weights.sum() > 0 else np.nan
        if np.isnan(reference):
            continue
        shapes = mine.groupby(_SHAPE_KEYS, sort=False).agg(count=("gpu_ns", "size"), gpu_ns=("gpu_ns", "sum"),
                                                          roof_ns=("roof_ns", "sum"), flops=("flops", "sum"))
        shapes = shapes.reset_index()
        pct = 100.0 * shapes["roof_ns"] / shapes["gpu_ns"].clip(lower=1)
        slow = shapes[pct < threshold("efficiency.gemm_far_below") * reference]
        if slow.empty:
            continue
        saved = np.maximum(slow["gpu_ns"] - slow["roof_ns"] / (reference / 100.0), 0.0)
        total, count = float(saved.sum()), int(slow["count"].sum())
        a = ALIGN[str(dtype)]
        findings.append(Finding(
            analyzer="efficiency", severity=_severity(basis, total, count),
            title=f"{len(slow)} {dtype} GEMM shape(s) with N or K not a multiple of {a} run far below the run's "
                  f"aligned GEMMs ({reference:.0f}% of roof)",
            recommendation=f"Pad the misaligned dimension to a multiple of {a} (better 64 or 128): a vocabulary "
                           "size, a hidden size or a head count times head size; tensor cores read operands in "
                           f"16-byte vectors ({a} {dtype} elements). Cost = time beyond the roofline time at the "
                           "reference efficiency.",
            evidence=EfficiencyEvidence(reference_pct_of_roof=round(reference, 1), alignment_elements=a,
                                        shapes=_shape_records(slow), saved_ms_total=round(total / 1e6, 3)),
            cost=basis.cost(total), key=f"misaligned:{dtype}", confidence=0.8, ranks=ranks_of(mine)))
    return findings


def _shape_records(slow: pd.DataFrame) -> list[ShapeRow]:
    top = slow.sort_values("gpu_ns", ascending=False).head(10)
    pct = (100.0 * top["roof_ns"] / top["gpu_ns"].clip(lower=1)).round(1)
    return [ShapeRow(op=op, shape=shape, count=int(count), gpu_ms=round(float(ns) / 1e6, 3), pct_of_roof=float(p))
            for op, shape, count, ns, p in zip(top["op"], top["shape"], top["count"], top["gpu_ns"], pct)]


def _top_shapes(gemms: pd.DataFrame) -> list[ShapeRow]:
    """The 8 commonest (op, shape) of `gemms`, with their count."""
    top = gemms.groupby(["op", "shape"]).size().sort_values(ascending=False).head(8).reset_index(name="count")
    return [ShapeRow(op=str(op), shape=str(shape), count=int(n)) for op, shape, n in top.itertuples(index=False)]


def tiny_gemms(basis: Basis) -> list[Finding]:
    gemms = _gemms(basis)
    tiny = gemms[gemms["roof_ns"] < threshold("efficiency.tiny_roof_ns")] if len(gemms) else gemms
    if len(tiny) < threshold_int("efficiency.min_tiny"):
        return []
    saved = float(np.maximum(tiny["gpu_ns"] - threshold("efficiency.tiny_roof_ns"), 0.0).sum())
    mean_us = float(tiny["gpu_ns"].mean()) / 1e3
    return [Finding(
        analyzer="efficiency", severity=_severity(basis, saved, len(tiny), threshold("efficiency.tiny_warn_share")),
        title=f"{len(tiny)} tiny GEMMs (each under {threshold('efficiency.tiny_roof_ns') / 1e3:.0f} us at the roofline) took {mean_us:.1f} us "
              "each on average: launch-bound",
        recommendation="Batch them (torch.bmm or a grouped GEMM over the small problems), capture the region in a "
                       "CUDA graph, or let torch.compile fuse them; a GEMM this small cannot fill the GPU.",
        evidence=EfficiencyEvidence(instances=len(tiny), mean_gpu_us=round(mean_us, 2), top_shapes=_top_shapes(tiny),
                                    saved_ms_total_upper_bound=round(saved / 1e6, 3)),
        cost=basis.cost(saved), key="tiny_gemms", confidence=0.6, ranks=ranks_of(tiny))]


def fp32_gemms(basis: Basis) -> list[Finding]:
    gemms = _gemms(basis)
    if gemms.empty:
        return []
    half = gemms[gemms["dtype"].isin(["bf16", "fp16"])]
    fp32 = gemms[gemms["dtype"] == "fp32"]
    if fp32.empty or half.empty or half["flops"].sum() < gemms["flops"].sum() / 2:
        return []
    if fp32["tf32"].astype(bool).any():
        return []  # ran faster than FP32 units can: TF32 was on
    rate = float(half["flops"].sum()) / max(float(half["gpu_ns"].sum()), 1.0)  # FLOPs per ns
    saved = float(np.maximum(fp32["gpu_ns"] - fp32["flops"] / rate, 0.0).sum())
    return [Finding(
        analyzer="efficiency", severity=_severity(basis, saved, len(fp32)),
        title=f"{len(fp32)} FP32 GEMMs ({fp32['gpu_ns'].sum() / 1e6:.2f} ms) in a run whose GEMMs are mostly "
              f"{half['dtype'].mode().iat[0]}, without TF32",
        recommendation="Run them in BF16 (autocast around the region, or cast the weights), or allow TF32: "
                       "torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision('high'). "
                       "Cost = their time minus their FLOPs at this run's BF16/FP16 GEMM rate.",
        evidence=EfficiencyEvidence(
            fp32_gemms=len(fp32), fp32_tflops=round(float(fp32["flops"].sum()) / max(float(fp32["gpu_ns"].sum()), 1.0)
                                                    / 1e3, 2),
            reference_tflops=round(rate / 1e3, 2), top_shapes=_top_shapes(fp32), saved_ms_total=round(saved / 1e6, 3)),
        cost=basis.cost(saved), key="fp32_gemms", confidence=0.8, ranks=ranks_of(fp32))]


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
        evidence=EfficiencyEvidence(
            instances=len(math_rows), reference=reference, saved_ms_total=round(saved / 1e6, 3),
            shapes=[ShapeRow(shape=str(s), dtype=str(d), count=int(n)) for s, d, n in math_rows.groupby(
                ["shape", "dtype"]).size().head(8).reset_index(name="count").itertuples(index=False)]),
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
        evidence=EfficiencyEvidence(chains=len(chains), kernels=int(chains["length"].sum()),
                                    longest_chain=int(chains["length"].max()), saved_ms_total=round(saved / 1e6, 3)),
        cost=basis.cost(saved), key="elementwise_chains", confidence=0.6, ranks=ranks_of(chains))]


def _device(analysis: Analysis) -> Device | None:
    known = {d.name: d for d in device_of_ranks(analysis).values() if d is not None}
    return next(iter(known.values())) if len(known) == 1 else None


def _problem(device: Device | None, tflops: float, mfu: float) -> str:
    """Why the reported figures cannot be right on `device` ('' when they can)."""
    if mfu > 100:
        return f"an MFU of {mfu:.1f}%, above 100%"
    if device is None:
        return ""
    peaks = {d: p for d, p in device.peaks.items() if p > 0}
    top = max(peaks.values(), default=math.nan)
    if tflops > top:
        return f"{tflops:.1f} TFLOP/s per GPU, above the {device.name}'s highest dense peak ({top:g} TFLOPS)"
    if mfu > 0 and tflops > 0:
        implied = tflops / (mfu / 100.0)
        if not any(abs(implied - p) <= threshold("efficiency.reported_peak_match") * p for p in peaks.values()):
            listed = ", ".join(f"{d} {p:g}" for d, p in peaks.items())
            return (f"{tflops:.1f} TFLOP/s at {mfu:.1f}% MFU, which assumes a peak of {implied:.0f} TFLOPS; the "
                    f"{device.name}'s dense peaks are {listed}")
    return ""


def reported_findings(analysis: Analysis) -> list[Finding]:
    table = analysis.store.tables.get("reported_throughput")
    if table is None or table.empty:
        return []
    device = _device(analysis)
    measured = analysis.view(step_mfu_view)
    ours = float(measured["tflops"].median()) if len(measured) and measured["model_flops"].gt(0).any() else math.nan
    findings = []
    for source, rows in table.groupby("source", sort=True):
        tflops = float(np.nanmedian(rows["tflops"])) if rows["tflops"].notna().any() else math.nan
        mfu = float(np.nanmedian(rows["mfu_pct"])) if rows["mfu_pct"].notna().any() else math.nan
        problem = _problem(device, tflops, mfu)
        where = f"{rows['file'].iloc[0]}:{int(rows['line'].iloc[0])}"
        evidence = EfficiencyEvidence(
            source=str(source), lines=len(rows), first_line=where,
            reported_tflops_per_gpu_median=None if math.isnan(tflops) else round(tflops, 2),
            reported_mfu_pct_median=None if math.isnan(mfu) else round(mfu, 2), device=device.name if device else "",
            device_dense_peaks_tflops=dict(device.peaks) if device else {},
            perftracker_tflops_per_gpu_median=None if math.isnan(ours) else round(ours, 2))
        shown = "; ".join(t for t in (f"{tflops:.1f} TFLOP/s per GPU" if not math.isnan(tflops) else "",
                                      f"MFU {mfu:.1f}%" if not math.isnan(mfu) else "") if t)
        title, advice = ((f"The job's log reports {problem}: its throughput figures assume a peak this device does "
                          "not have", "Fix the trainer's peak table for this device (torchtitan's get_peak_flops, "
                          "Megatron's or NeMo's FLOPs callback) and compare with perftracker's step_mfu table, "
                          "measured from the ops and perftracker/data/devices.toml's dense peaks.") if problem else
                         (f"The job's {source} log reports {shown or 'throughput'} (median of {len(rows)} line(s))"
                          + (f"; perftracker measured {ours:.1f} TFLOP/s per GPU from the traced ops"
                             if not math.isnan(ours) else ""),
                          "The log's figure counts the model's FLOPs analytically; perftracker's counts the modelled "
                          "ops of the profiled steps. A large gap points at ops no model covers or a different FLOPs "
                          "convention."))
        findings.append(Finding(analyzer="efficiency", severity=Severity.WARNING if problem else Severity.INFO,
                                title=title, recommendation=advice, evidence=evidence, key=f"reported:{source}",
                                confidence=None))
    return findings


def analyze_efficiency(analysis: Analysis) -> list[Finding]:
    """Compute efficiency findings (docs/internals/analyzers.md)."""
    reported = reported_findings(analysis)
    basis = analysis.view(basis_view)
    if basis.instances.empty:
        return reported
    findings = [*misaligned_gemms(basis), *fp32_gemms(basis), *tiny_gemms(basis), *unfused_attention(basis),
                *elementwise_chains(basis)]
    names = device_names(analysis)
    unknown = sorted(rank for rank, device in device_of_ranks(analysis).items() if device is None)
    if unknown:
        shown = sorted({names.get(r) or "no device name in the trace" for r in unknown})
        findings.append(Finding(
            analyzer="efficiency", severity=Severity.INFO,
            title=f"Device not in the device table ({', '.join(shown[:3])}): FLOPs and TFLOPS without % of peak or MFU",
            recommendation="Add the device's dense peaks and memory bandwidth in a TOML file like "
                           "perftracker/data/devices.toml and pass it with --devices FILE (or PERFTRACKER_DEVICES).",
            evidence=EfficiencyEvidence(device_names=shown[:10], ranks=unknown[:64]), ranks=tuple(unknown[:64]),
            key="unknown_device", confidence=None))
    return [*findings, *reported]
