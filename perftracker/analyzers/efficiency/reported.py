"""The throughput a job's log reports, judged against the device: a figure that implies a peak this device lacks."""

from __future__ import annotations

import math

import numpy as np

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.devices import Device
from perftracker.analyzers.efficiency.roofline import device_of_ranks
from perftracker.analyzers.efficiency.tables import step_mfu_view
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.traces import EfficiencyEvidence


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
