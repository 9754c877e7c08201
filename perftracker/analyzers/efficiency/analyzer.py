"""The efficiency analyzer, `analyze_efficiency(analysis)`: compute findings from the op roofline, and what the
tables cannot say on their own (a device the device table does not know)."""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.evidence import basis_view
from perftracker.analyzers.efficiency.fusion_findings import elementwise_chains, unfused_attention
from perftracker.analyzers.efficiency.gemm_findings import fp32_gemms, misaligned_gemms, tiny_gemms
from perftracker.analyzers.efficiency.reported import reported_findings
from perftracker.analyzers.efficiency.roofline import device_names, device_of_ranks
from perftracker.analyzers.findings import Finding, Severity


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
            evidence={"device_names": shown[:10], "ranks": unknown[:64]}, ranks=tuple(unknown[:64]),
            key="unknown_device", confidence=None))
    return [*findings, *reported]
