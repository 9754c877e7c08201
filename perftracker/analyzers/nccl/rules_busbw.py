"""NCCL rules on what the job measured: bus bandwidth far below what the hardware should give, and wrong results;
the traces' large collectives, timed by their transfer only, are measures too (`measured_context_view`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import Measure, NcclContext, context_view, finding
from perftracker.analyzers.nccl.expected_bw import (
    Expectation,
    Topology,
    asymmetric_paths,
    expect,
    topology_of,
)
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.network import NcclConfigEvidence

BANDWIDTH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
TOPOLOGY_KEYS = ("topo_path", "topo_link")


def _gpus(analysis: Analysis) -> tuple[str, ...]:
    ranks = analysis.store["ranks"]
    if ranks.empty or "device_name" not in ranks:
        return ()
    return tuple(sorted({str(n) for n in ranks["device_name"].dropna() if str(n)}))


def trace_measures(analysis: Analysis) -> list[Measure]:
    """See docs/internals/analyzers.md."""
    split: pd.DataFrame = analysis.view(collective_split_view)
    if split.empty:
        return []
    rows = split[(split["source"].astype(str) == "gpu_kernel") & (split["bytes"] >= threshold("nccl.trace_busbw_min_bytes"))
                 & split["collective"].astype(str).isin(BANDWIDTH_COLLECTIVES)]
    inst = rows.drop_duplicates("instance")
    inst = inst[np.isfinite(inst["busbw_gbs"].to_numpy(float)) & (inst["busbw_gbs"] > 0)]
    gpus = _gpus(analysis)
    out: list[Measure] = []
    for (pg, coll, members), group in inst.groupby([inst["pg"].astype(str), inst["collective"].astype(str),
                                                    inst["members"]], sort=True):
        if len(group) < threshold("nccl.trace_busbw_min_instances"):
            continue
        best = group.iloc[int(group["busbw_gbs"].to_numpy(float).argmax())]
        out.append(Measure("trace", f"{coll} in process group {pg} ({int(members)} ranks, {len(group)} instances "
                           f">= {int(threshold('nccl.trace_busbw_min_bytes')) >> 20} MiB, transfer time only)", float(best["busbw_gbs"]),
                           int(best["bytes"]), f"traces: instance {int(best['instance'])}", gpus, (), int(members)))
    return out


def measured_context_view(analysis: Analysis) -> NcclContext:
    """The run's NCCL context with the traces' measures added where its log shows a topology
    (docs/internals/analyzers.md), once per analysis."""
    ctx = analysis.view(context_view)
    if not any(p.has(key) for p in ctx.procs for key in TOPOLOGY_KEYS):
        return ctx
    extra = trace_measures(analysis)
    return replace(ctx, measured=[*ctx.measured, *extra]) if extra else ctx


def _warn_ratio(m: Measure) -> float:
    # a training step's NCCL kernels share the GPU with compute: only a wider gap warns
    return threshold("nccl.trace_busbw_warn_ratio") if m.source == "trace" else threshold("nccl.busbw_warn_ratio")


@dataclass(frozen=True)
class Cause:
    subject: str  # the variable at fault ("" when the hardware itself bounds it)
    title: str
    recommendation: str
    flag: str


def _cause(ctx: NcclContext, topo: Topology, exp: Expectation) -> Cause:
    fewer_links = exp.nvl_links_hw > 0 and exp.nvl_links_seen < exp.nvl_links_hw * 0.9
    few_channels = exp.channels_hw > 0 and 0 < topo.channels < exp.channels_hw
    shape = []
    if fewer_links:
        shape.append(f"{exp.nvl_links_seen:.3g} NVLink{'s' if exp.nvl_links_seen != 1 else ''} of "
                     f"{exp.nvl_links_hw} between GPUs")
    if few_channels:
        shape.append(f"{topo.channels} channels of {exp.channels_hw}")
    if topo.topo_file and (fewer_links or few_channels or not exp.nvl_links_hw):
        return Cause("NCCL_TOPO_FILE", f"NCCL_TOPO_FILE={topo.topo_file} forces a topology with "
                     f"{' and '.join(shape) or 'less bandwidth than the hardware has'}",
                     "Unset NCCL_TOPO_FILE (NCCL then detects the real links), or fix the file: its <nvlink count=> "
                     "and link speeds must match `nvidia-smi topo -m` / `nvidia-smi nvlink -s`.", "forced_topology")
    if "SHM" in topo.transports and "P2P" not in topo.transports and not topo.multi_node:
        return Cause("NCCL_P2P_DISABLE", "GPUs of one node exchange data through host memory (SHM), not P2P",
                     "Unset NCCL_P2P_DISABLE / raise NCCL_P2P_LEVEL, share IPC between the ranks' containers "
                     "(--ipc=host) and check that CUDA P2P works (p2pBandwidthLatencyTest).", "p2p_disabled")
    if topo.multi_node and any(p.has("gdr_disabled") for p in ctx.procs):
        return Cause("NCCL_NET_GDR_LEVEL", "GPUDirect RDMA is off on this multi-node job: network traffic is "
                     "staged through host memory", "Load nvidia-peermem, check ACS/IOMMU, or raise "
                     "NCCL_NET_GDR_LEVEL when the GPU-NIC distance is the cause.", "gdr_disabled")
    pxn_off = [s for s in ctx.settings.get("NCCL_PXN_DISABLE", []) if s.value.strip() == "1"]
    if topo.multi_node and pxn_off:
        return Cause("NCCL_PXN_DISABLE", "PXN is disabled on this multi-node job: a GPU reaches only the NICs of its "
                     "own PCIe switch", "Unset NCCL_PXN_DISABLE so NCCL can route through a peer GPU's NIC over "
                     "NVLink.", "pxn_disabled")
    hca = ctx.settings.get("NCCL_IB_HCA", [])
    used = {str(n.get("hca")) for p in ctx.procs for n in p.jsons("nic")}
    if topo.multi_node and hca and used and len(used) < len(topo.net_gbs):
        return Cause("NCCL_IB_HCA", f"NCCL_IB_HCA={hca[0].value} leaves NICs unused: {len(used)} of the "
                     f"{len(topo.net_gbs)} the topology shows", "List every HCA of the node in NCCL_IB_HCA (or unset "
                     "it); check that every node uses the same set (`NET/IB : Using` lines).", "hca_problem")
    asym = asymmetric_paths(topo)
    if asym is not None:
        a, b = asym.slow_pair
        return Cause("", f"Asymmetric {asym.path_type} paths: {a} - {b} at {asym.slow_gbs:g} GB/s against "
                     f"{asym.fast_gbs:g} GB/s between other GPU pairs", "Rings and trees run at their slowest hop: "
                     f"check the {a} - {b} pair with `nvidia-smi topo -m` and `nvidia-smi nvlink -s` (a link down, "
                     "a bridge missing or badly seated, a GPU in a slower slot); if the hardware is built so, keep "
                     "that pair out of the job's communicators.", "asymmetric_paths")
    capped = [s for var in ("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS")
              for s in ctx.settings.get(var, [])]
    if few_channels or (capped and topo.channels and topo.channels < 8):
        var = capped[0].key if capped else ""
        return Cause(var, f"NCCL built {' and '.join(shape) or f'{topo.channels} channels'}: fewer channels than "
                     "the hardware allows", "Unset NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS / NCCL_MAX_CTAS so NCCL "
                     "builds one ring per link pair.", "few_channels")
    if fewer_links:
        return Cause("", f"NVLink slower than its type: {shape[0]}", "Check `nvidia-smi nvlink -s` and "
                     "`nvidia-smi topo -m` for links down or degraded (an NVLink bridge badly seated, a link in "
                     "recovery); reseat or replace the bridge.", "slow_link")
    return Cause("", f"Bus bandwidth bounded by {exp.bound_by}", "Compare with nccl-tests on a healthy node of the "
                 "same type; check the links the bound names (nvidia-smi topo -m, ibstat).", "busbw_gap")


def bus_bandwidth(ctx: NcclContext) -> list[Finding]:
    """Measured bus bandwidth far below what the hardware should give (docs/internals/analyzers.md)."""
    if not ctx.measured:
        return []
    gpus = tuple(sorted({g for m in ctx.measured for g in m.gpus}))
    topo = topology_of(ctx, gpus)
    exp = expect(topo)
    if exp is None or exp.busbw_gbs <= 0:
        return []
    worst: Measure = min(ctx.measured, key=lambda m: m.busbw_gbs / _warn_ratio(m))
    ratio = worst.busbw_gbs / exp.busbw_gbs
    if ratio >= _warn_ratio(worst):
        return []
    cause = _cause(ctx, topo, exp)
    gap = exp.busbw_gbs / max(worst.busbw_gbs, 1e-9)
    evidence: NcclConfigEvidence = {
        "measured_busbw_gbs": round(worst.busbw_gbs, 2), "measured": f"{worst.source} {worst.what} at {worst.where}",
        "expected_busbw_gbs": round(exp.busbw_gbs, 1), "gap_x": round(gap, 1), "bound_by": exp.bound_by,
        "channels": topo.channels, "channels_hardware": exp.channels_hw,
        "nvlinks_seen": round(exp.nvl_links_seen, 2), "nvlinks_hardware": exp.nvl_links_hw,
        "transports": sorted(topo.transports), "gpus": list(gpus),
        "nvlink_path_gbs": sorted(set(topo.nvl_gbs))[:8],
        "log": [w for w in (topo.where.get("topo_file"), topo.where.get("path"), topo.where.get("channels")) if w],
    }
    severity = Severity.CRITICAL if ratio < threshold("nccl.busbw_critical_ratio") and worst.source != "trace" else Severity.WARNING
    title = (f"{cause.title}: bus bandwidth {worst.busbw_gbs:.1f} GB/s, {gap:.1f}x below the "
             f"{exp.busbw_gbs:.0f} GB/s this hardware should give")
    return [finding(cause.flag, severity, title, cause.recommendation, evidence, hosts=list(worst.hosts),
                    subject=cause.subject, variables=[cause.subject] if cause.subject else [])]


def wrong_results(ctx: NcclContext) -> Iterator[Finding]:
    """nccl-tests found wrong values: the collective corrupted data (critical, whatever the bandwidth)."""
    for m in ctx.measured:
        if m.source == "nccl_tests" and m.wrong > 0:
            yield finding(
                "nccl_tests_wrong", Severity.CRITICAL, f"nccl-tests {m.what}: {m.wrong} wrong value(s) in the results",
                "Data was corrupted in transit or by a faulty GPU: rerun on subsets of the nodes to isolate it, and "
                "check dmesg for Xid errors and the NICs' error counters.",
                {"measured": f"{m.what} at {m.where}", "wrong": m.wrong}, hosts=list(m.hosts), key=m.where)
