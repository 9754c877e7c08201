"""GPU health from NVML / nvidia-smi / DCGM samples, one finding per problem of each (host, GPU), naming its ranks:
throttling, low clocks, XID / ECC, PCIe, low utilization."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.rdma import samples
from perftracker.analyzers.health.topology import rank_map_view, ranks_of_gpu
from perftracker.analyzers.stragglers.significance import judge_outliers
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.network import GpuHealthEvidence, GpuLinksEvidence
from perftracker.store import Store

REASON_BITS = {"thermal": 0x20 | 0x40, "hw_slowdown": 0x8, "power_brake": 0x80, "power_cap": 0x4}
MAX_PERIODS = 20
MAX_BINS = 50  # time windows of the peer test
THROTTLE = "throttle_"  # the start of a throttling finding's `check` (root-cause chains read it)
GpuKey = tuple[str, int]


@dataclass(frozen=True)
class PeerVerdict:
    """Which GPUs are significantly below their peers on one metric."""

    named: frozenset[GpuKey]
    confidence: float
    trials: int
    reason: str

    def names(self, key: GpuKey) -> bool:
        return key in self.named


def _peer_series(wide: pd.DataFrame, metric: str, busy_only: bool) -> pd.Series:
    col = wide[metric].dropna() if metric in wide else pd.Series(dtype=float)
    if busy_only and "util_gpu_pct" in wide and (wide["util_gpu_pct"] >= threshold("peer_outliers.busy_util_pct")).any():
        col = col[wide["util_gpu_pct"].reindex(col.index) >= threshold("peer_outliers.busy_util_pct")]
    return col


def peer_verdict(wide_by_gpu: dict[GpuKey, pd.DataFrame], metric: str, busy_only: bool) -> PeerVerdict:
    """See docs/internals/analyzers.md. Lower values of `metric` are worse."""
    series = {key: _peer_series(wide, metric, busy_only) for key, wide in sorted(wide_by_gpu.items())}
    series = {key: s for key, s in series.items() if len(s)}
    if len(series) < 2:
        return PeerVerdict(frozenset(), 0.0, 0, "fewer than two GPUs sampled: nothing to compare with")
    start = min(int(s.index.min()) for s in series.values())
    end = max(int(s.index.max()) for s in series.values())
    bins = max(1, min(MAX_BINS, max(len(s) for s in series.values())))
    width = max((end - start) / bins, 1.0)
    keys = list(series)
    frames = []
    for column, key in enumerate(keys):
        s = series[key]
        trial = np.minimum(((s.index.to_numpy(dtype=np.int64) - start) / width).astype(np.int64), bins - 1)
        per_bin = pd.Series(s.to_numpy(dtype=float)).groupby(trial).median()
        frames.append(pd.DataFrame({"trial": per_bin.index, "rank": column, "value": -per_bin.to_numpy()}))
    verdict = judge_outliers(pd.concat(frames, ignore_index=True))
    named = frozenset(keys[i] for i in verdict.ranks) if verdict.significant else frozenset()
    return PeerVerdict(named, verdict.confidence, verdict.trials, verdict.reason)


def gpu_counters(store: Store) -> pd.DataFrame:
    c = store["counters"]
    return c[c["device"].astype(str).str.startswith("gpu:")]


def gpu_wide(store: Store) -> dict[tuple[str, int], pd.DataFrame]:
    """(host, gpu) -> samples as one row per time stamp, one column per metric (xid rows excluded)."""
    rows = gpu_counters(store)
    rows = rows[rows["name"] != "xid"]
    return {(str(host), int(str(dev).split(":")[1])): samples(g)
            for (host, dev), g in rows.groupby(["host", "device"], observed=True)}


def throttle_mask(wide: pd.DataFrame, reason: str) -> pd.Series:
    """Per sample: was the GPU held back by `reason` (thermal, hw_slowdown, power_brake, power_cap)?"""
    if "clock_event_reasons" in wide:
        bits = wide["clock_event_reasons"].fillna(0).astype(np.int64)
        return (bits & REASON_BITS[reason]) != 0
    counter = {"thermal": "thermal_violation_us", "power_cap": "power_violation_us"}.get(reason)
    if counter and counter in wide:
        dt_us = pd.Series(wide.index, index=wide.index).diff() / 1e3
        return (wide[counter].diff() / dt_us).fillna(0) >= 0.5
    return pd.Series(False, index=wide.index)


def periods(mask: pd.Series) -> list[tuple[int, int]]:
    """Runs of True samples as (start_ns, end_ns), each lasting until the next sample (or the last)."""
    ts = mask.index.to_numpy(dtype=np.int64)
    edges = np.diff(np.concatenate(([0], mask.to_numpy(dtype=bool).astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.minimum(np.flatnonzero(edges == -1), len(ts) - 1)
    return [(int(ts[s]), int(ts[e])) for s, e in zip(starts, ends)]


def gpu_series_view(analysis: Analysis) -> dict[tuple[str, int], pd.DataFrame]:
    """`gpu_wide` of the run: (host, gpu) -> samples, one row per time stamp, one column per metric."""
    return gpu_wide(analysis.store)


@dataclass(frozen=True)
class Throttle:
    """One GPU held back by one reason: per sample whether it was (`mask`), and the runs of it (`periods`)."""

    mask: pd.Series
    periods: list[tuple[int, int]]


def throttle_view(analysis: Analysis) -> dict[tuple[str, int, str], Throttle]:
    """(host, gpu, reason) -> Throttle, for every sampled GPU and every reason of REASON_BITS."""
    out: dict[tuple[str, int, str], Throttle] = {}
    for (host, gpu), wide in analysis.view(gpu_series_view).items():
        for reason in REASON_BITS:
            mask = throttle_mask(wide, reason)
            out[(host, gpu, reason)] = Throttle(mask, periods(mask))
    return out


def _med(wide: pd.DataFrame, name: str, busy: bool = False) -> float:
    """The median of `name` (NaN unsampled); `busy`: over the samples of a busy GPU, when it ever was."""
    if name not in wide or wide[name].isna().all():
        return float("nan")
    working = wide["util_gpu_pct"] >= threshold("gpu_health.busy_util_pct") if busy and "util_gpu_pct" in wide \
        else None
    return float((wide[name][working] if working is not None and working.any() else wide[name]).median())


class GpuContext:
    """What every per-GPU check compares with: the samples of all GPUs, the rank map, the job's medians."""

    def __init__(self, analysis: Analysis) -> None:
        store = analysis.store
        self.wide = analysis.view(gpu_series_view)
        self.throttle = analysis.view(throttle_view)
        self.rmap = analysis.view(rank_map_view)
        self.xids = gpu_counters(store)
        self.xids = self.xids[self.xids["name"] == "xid"]
        clocks = [m for m in (_med(w, "sm_clock_mhz", busy=True) for w in self.wide.values()) if m == m]
        utils = [m for m in (_med(w, "util_gpu_pct") for w in self.wide.values()) if m == m]
        self.job_clock = float(np.median(clocks)) if clocks else float("nan")
        self.job_util = float(np.median(utils)) if utils else float("nan")
        self.clock_outliers = peer_verdict(self.wide, "sm_clock_mhz", busy_only=True)
        self.util_outliers = peer_verdict(self.wide, "util_gpu_pct", busy_only=False)


G = TypeVar("G", GpuHealthEvidence, GpuLinksEvidence)


def gpu_finding(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame, check: str, severity: Severity, title: str,
                advice: str, evidence: G, analyzer: str = "gpu_health", confidence: float | None = None) -> Finding:
    """A finding about one GPU: `title` with "{gpu}" naming it (host, index, ranks), common evidence added, a number
    not measured (NaN) as None."""
    ranks = ranks_of_gpu(ctx.rmap, host, gpu)
    on = f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if ranks else ""
    ev: G = {"host": host, "gpu": gpu, "check": check, "ranks": list(ranks),
          "window": {"start_ns": int(wide.index.min()), "end_ns": int(wide.index.max()),
                     "seconds": round((int(wide.index.max()) - int(wide.index.min())) / 1e9, 3)},
          "samples": len(wide), "sm_clock_mhz": _med(wide, "sm_clock_mhz", busy=True),
          "job_median_sm_clock_mhz": ctx.job_clock, "temp_c_median": _med(wide, "temp_c"),
          "temp_c_max": float(wide["temp_c"].max()) if "temp_c" in wide else float("nan"),
          "power_w_median": _med(wide, "power_w"), "power_limit_w": _med(wide, "power_limit_w")}
    ev.update(evidence)
    return Finding(analyzer=analyzer, severity=severity, title=title.format(gpu=f"GPU {gpu} on host {host}{on}"),
                   recommendation=advice, evidence={k: (None if isinstance(v, float) and v != v else v)
                                                    for k, v in ev.items()}, ranks=ranks, hosts=(host,), confidence=confidence,
                   key=f"gpu:{check}:{host}:{gpu}")


_THROTTLE_ADVICE = {
    "thermal": "The GPU slows its clocks to stay within temperature: check its cooling (fans, airflow, inlet "
               "temperature, a blocked heatsink) with `nvidia-smi -q -d TEMPERATURE,PERFORMANCE`; in synchronous "
               "training every other rank waits for it.",
    "hw_slowdown": "Hardware slowdown (HW_SLOWDOWN) means thermal or power-supply protection: check PSUs, "
                   "cooling and `nvidia-smi -q -d PERFORMANCE`; report persistent cases to the vendor.",
    "power_brake": "External power brake (HW_POWER_BRAKE) asserted by the system: check the chassis power "
                   "budget and PSU health.",
    "power_cap": "The GPU runs at its power limit and lowers clocks: check `nvidia-smi -q -d POWER` for a "
                 "reduced limit on this GPU compared with its peers.",
}


def _throttle(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame, clock_low: bool) -> Iterator[Finding]:
    for reason in ("thermal", "hw_slowdown", "power_brake", "power_cap"):
        throttle = ctx.throttle[(host, gpu, reason)]
        mask = throttle.mask
        share = float(mask.mean()) if len(mask) else 0.0
        if share < threshold("gpu_health.throttle_share"):
            continue
        severity = Severity.CRITICAL if share >= threshold("gpu_health.critical_share") and reason != "power_cap" else Severity.WARNING
        if reason == "power_cap" and not clock_low:
            severity = Severity.INFO
        spans = throttle.periods
        during = float(wide.loc[mask, "sm_clock_mhz"].median()) if "sm_clock_mhz" in wide else float("nan")
        clock_text = (f"; SM clock {during:.0f} MHz while throttled against a job median of {ctx.job_clock:.0f}"
                      if during == during and ctx.job_clock == ctx.job_clock else "")
        yield gpu_finding(ctx, host, gpu, wide, f"{THROTTLE}{reason}", severity,
                          f"{{gpu}} was in {reason.replace('_', ' ')} slowdown {100 * share:.0f}% of the time"
                          + clock_text, _THROTTLE_ADVICE[reason], GpuHealthEvidence(
                              reason=reason, sm_clock_mhz_throttled=during, share_of_time=round(share, 4),
                              periods=[list(p) for p in spans[:MAX_PERIODS]],
                              thresholds={"share": threshold("gpu_health.throttle_share"),
                                          "critical_share": threshold("gpu_health.critical_share")}))


def _gpu_findings(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame) -> list[Finding]:
    out: list[Finding] = []
    clock = _med(wide, "sm_clock_mhz", busy=True)
    below = clock == clock and ctx.job_clock == ctx.job_clock and clock < (1 - threshold("gpu_health.clock_deficit")) * ctx.job_clock
    clock_low = below and ctx.clock_outliers.names((host, gpu))
    out.extend(_throttle(ctx, host, gpu, wide, clock_low))
    if below and not any(f.severity >= Severity.WARNING for f in out):
        out.append(_below_peers(ctx, host, gpu, wide, "sm_clock", ctx.clock_outliers,
                                f"{{gpu}} runs at {clock:.0f} MHz SM clock against a job median of {ctx.job_clock:.0f}",
                                "This GPU's clocks are lower than its peers' without a reported throttle reason: check "
                                "application clocks / clock locks (`nvidia-smi -q -d CLOCK`) and its power limit.",
                                GpuHealthEvidence(deficit=round(1 - clock / ctx.job_clock, 4),
                                                  threshold=threshold("gpu_health.clock_deficit"))))
    xids = ctx.xids[(ctx.xids["host"] == host) & (ctx.xids["device"] == f"gpu:{gpu}")]
    dbe = float(wide["ecc_dbe"].max() - wide["ecc_dbe"].min()) if "ecc_dbe" in wide else 0.0
    if len(xids) or dbe > 0:
        values = sorted({int(v) for v in xids["value"]})
        what = ([f"XID {', '.join(map(str, values))}"] if values else []) \
            + ([f"{dbe:.0f} new double-bit ECC error(s)"] if dbe else [])
        out.append(gpu_finding(ctx, host, gpu, wide, "xid_ecc", Severity.CRITICAL, "{gpu} reported " + ", ".join(what),
                               "XID / uncorrectable ECC errors mean a faulty GPU or driver event: look up the XID in "
                               "NVIDIA's XID catalog, drain the node and run diagnostics (dcgmi diag -r 3).",
                               GpuHealthEvidence(xids=values, xid_times_ns=[int(t) for t in xids["ts_ns"].head(20)],
                                                 ecc_dbe_new=dbe)))
    sbe = float(wide["ecc_sbe"].max() - wide["ecc_sbe"].min()) if "ecc_sbe" in wide else 0.0
    if sbe > 0:
        out.append(gpu_finding(ctx, host, gpu, wide, "ecc_sbe", Severity.INFO,
                               f"{{gpu}} corrected {sbe:.0f} single-bit ECC error(s) during the window",
                               "Corrected errors cost little; a rising rate can precede row remapping or failure.",
                               GpuHealthEvidence(ecc_sbe_new=sbe)))
    out.extend(_pcie(ctx, host, gpu, wide))
    util = _med(wide, "util_gpu_pct")
    if (util == util and ctx.job_util >= threshold("gpu_health.busy_util_pct")
            and util < ctx.job_util - threshold("gpu_health.util_gap_pct")):
        out.append(_below_peers(ctx, host, gpu, wide, "utilization", ctx.util_outliers,
                                f"{{gpu}} is {util:.0f}% utilized against a job median of {ctx.job_util:.0f}%",
                                "This GPU waits while its peers compute: look for a data-loading or CPU bottleneck on "
                                "its rank, or a rank placed on the wrong GPU.", GpuHealthEvidence(
                                    util_gpu_pct=util, job_median_util_pct=ctx.job_util,
                                    gap_threshold=threshold("gpu_health.util_gap_pct"))))
    return out


def _below_peers(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame, check: str, verdict: PeerVerdict,
                 title: str, advice: str, evidence: GpuHealthEvidence) -> Finding:
    """A GPU below the job's median: a warning with `advice` when the peer test names it, else context."""
    named = verdict.names((host, gpu))
    return gpu_finding(ctx, host, gpu, wide, check, Severity.WARNING if named else Severity.INFO,
                       title + ("" if named else "; within the spread among this job's GPUs"), advice if named else
                       f"Not an outlier by this run's samples: {verdict.reason or 'other GPUs are as low'}.",
                       GpuHealthEvidence(**evidence, significance={"confidence": round(verdict.confidence, 4),
                                                                   "trials": verdict.trials}),
                       confidence=verdict.confidence)


def _pcie(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame) -> Iterator[Finding]:
    for metric, max_metric, busy_only in (("pcie_width", "pcie_max_width", False), ("pcie_gen", "pcie_max_gen", True)):
        if metric not in wide:
            continue
        peer = max((float(w[metric].max()) for w in ctx.wide.values() if metric in w), default=float("nan"))
        limit = wide[max_metric] if max_metric in wide else pd.Series(peer, index=wide.index)
        rows = wide
        if busy_only and "util_gpu_pct" in wide:
            rows = wide[wide["util_gpu_pct"] >= threshold("gpu_health.busy_util_pct")]
        if rows.empty:
            continue
        low = rows[metric] < limit.reindex(rows.index)
        if low.mean() > 0.5:
            cur, top = float(rows[metric].median()), float(limit.max())
            word = "width x" if metric == "pcie_width" else "generation "
            yield gpu_finding(ctx, host, gpu, wide, metric, Severity.WARNING,
                              f"{{gpu}} PCIe link runs at {word}{cur:.0f}, below its maximum {word}{top:.0f}",
                              "A degraded PCIe link slows host transfers and GPUDirect RDMA: reseat the GPU or "
                              "riser, check `nvidia-smi -q -d PCIE` and `lspci -vv` (LnkSta vs LnkCap).",
                              GpuHealthEvidence(current=cur, maximum=top, share_of_samples=round(float(low.mean()), 4)))


def analyze_gpu_health(analysis: Analysis) -> list[Finding]:
    ctx = analysis.view(GpuContext)
    return [f for (host, gpu), wide in sorted(ctx.wide.items()) if len(wide) for f in _gpu_findings(ctx, host, gpu, wide)]
