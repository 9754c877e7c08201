"""GPU interconnect health from NVML / DCGM samples, per (host, GPU) naming its ranks: NVLink errors and links down,
PCIe replays."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.gpu_health import GpuContext, gpu_counters, gpu_finding
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.network import GpuLinksEvidence

ANALYZER = "gpu_links"
LINK_METRICS = ("nvlink_links", "nvlink_active", "nvlink_replay", "nvlink_recovery", "nvlink_crc_flit",
                "nvlink_crc_data", "pcie_replay")

_ERRORS_ADVICE = ("NVLink CRC errors and replays mean a marginal link (connector, NVSwitch tray or baseboard "
                  "signal integrity): every error costs a retransmission, so NCCL traffic over NVLink slows and "
                  "jitters. See which link with `nvidia-smi nvlink -e -i {gpu}` (per-link error counters, "
                  "`-ec` per lane); if they keep rising, drain the node and have the GPU / baseboard reseated or "
                  "replaced after `dcgmi diag -r 3`.")
_RECOVERY_ADVICE = ("An NVLink recovery is the link retraining: traffic on it stalls while it does, and repeated "
                    "recoveries usually end with the link down (XID 74). Check `nvidia-smi nvlink -e -i {gpu}` and "
                    "`nvidia-smi nvlink -s -i {gpu}`, look for XID 74 in `dmesg`, then drain the node for "
                    "diagnostics (`dcgmi diag -r 3`) and a reseat / replacement.")
_DOWN_ADVICE = ("Each NVLink down takes its share of this GPU's NVLink bandwidth (a bridged pair can lose a half "
                "or a third of it), and NCCL then routes around it or falls back to PCIe / shared memory. Check "
                "`nvidia-smi nvlink -s -i {gpu}` and `nvidia-smi topo -m`; on NVSwitch systems also the fabric "
                "manager (`systemctl status nvidia-fabricmanager`); then drain the node and reseat or replace.")
_PCIE_ADVICE = ("PCIe replays are retransmissions after link-level errors (signal integrity: riser, slot, cable or "
                "retimer). They slow host <-> GPU copies and GPUDirect RDMA. Check `nvidia-smi -q -d PCIE -i {gpu}` "
                "(replay counters, link generation / width) and AER errors in `lspci -vv` / `dmesg`; reseat the "
                "GPU or riser, and drain the node if the counter keeps rising.")


def _rise(wide: pd.DataFrame, name: str) -> tuple[float, float, int]:
    """(increase, seconds covered, time of the first rise or -1) of a cumulative counter."""
    if name not in wide:
        return 0.0, 0.0, -1
    col = wide[name].dropna()
    if len(col) < 2:
        return 0.0, 0.0, -1
    steps = col.diff().clip(lower=0).fillna(0)
    rising = steps[steps > 0]
    return (float(steps.sum()), (int(col.index[-1]) - int(col.index[0])) / 1e9,
            int(rising.index[0]) if len(rising) else -1)


def _rate(increase: float, seconds: float) -> float:
    return increase / seconds if seconds > 0 else float("nan")


def _nvlink_errors(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame) -> Iterator[Finding]:
    recovery, seconds, first = _rise(wide, "nvlink_recovery")
    if recovery > 0:
        yield gpu_finding(ctx, host, gpu, wide, "nvlink_recovery", Severity.CRITICAL,
                          f"{{gpu}} NVLink recovered {recovery:.0f} time(s) in {seconds:.0f} s: links retrain",
                          _RECOVERY_ADVICE.format(gpu=gpu), GpuLinksEvidence(
                              nvlink_recovery_increase=recovery, rate_per_min=round(60 * _rate(recovery, seconds), 3),
                              first_rise_ns=first, window_s=round(seconds, 3)), analyzer=ANALYZER)
    crc = {name: _rise(wide, name) for name in ("nvlink_crc_flit", "nvlink_crc_data")}
    replay, r_seconds, r_first = _rise(wide, "nvlink_replay")
    crc_total = sum(v[0] for v in crc.values())
    if crc_total <= 0 and replay <= 0:
        return
    seconds = max([r_seconds] + [v[1] for v in crc.values()])
    crc_rate = _rate(crc_total, seconds)
    severity = Severity.WARNING if replay > 0 or crc_rate >= threshold("gpu_links.nvlink_crc_per_s") else Severity.INFO
    parts = ([f"{crc_total:,.0f} CRC errors ({crc_rate:,.1f}/s)"] if crc_total else []) \
        + ([f"{replay:,.0f} replays"] if replay else [])
    firsts = [t for t in [r_first] + [v[2] for v in crc.values()] if t >= 0]
    yield gpu_finding(ctx, host, gpu, wide, "nvlink_errors", severity,
                      f"{{gpu}} NVLink errors rising: {' and '.join(parts)} in {seconds:.0f} s",
                      _ERRORS_ADVICE.format(gpu=gpu), GpuLinksEvidence(
                          nvlink_crc_flit_increase=crc["nvlink_crc_flit"][0],
                          nvlink_crc_data_increase=crc["nvlink_crc_data"][0], nvlink_replay_increase=replay,
                          crc_rate_per_s=round(crc_rate, 3), replay_rate_per_min=round(60 * _rate(replay, seconds), 3),
                          first_rise_ns=min(firsts) if firsts else -1, window_s=round(seconds, 3),
                          thresholds={"crc_per_s": threshold("gpu_links.nvlink_crc_per_s"), "replay": 1}),
                      analyzer=ANALYZER)


def _links_down(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame) -> list[Finding]:
    if "nvlink_active" not in wide or "nvlink_links" not in wide:
        return []
    on_host = {g: w for (h, g), w in ctx.wide.items() if h == host and "nvlink_active" in w}
    if not any(float(w["nvlink_active"].max()) > 0 for w in on_host.values()):
        return []  # no GPU of the host has an active NVLink: nothing is connected to use
    rows = wide[["nvlink_links", "nvlink_active"]].dropna()
    peers = [float(w["nvlink_active"].median()) for g, w in on_host.items() if g != gpu]  # all have the column
    peer_active = float(pd.Series(peers).median()) if peers else float("nan")
    down = rows["nvlink_active"] < rows["nvlink_links"]
    below_peers = rows["nvlink_active"] < peer_active if peer_active == peer_active else pd.Series(False, rows.index)
    bad = down | below_peers
    if rows.empty or not bad.any():
        return []
    worst = rows[bad]
    at = int(worst["nvlink_active"].to_numpy().argmin())
    least, present = float(worst["nvlink_active"].iloc[at]), float(worst["nvlink_links"].iloc[at])
    severity = Severity.CRITICAL if below_peers.any() else Severity.WARNING
    than = f", its peers on the host have {peer_active:.0f}" if below_peers.any() else ""
    return [gpu_finding(ctx, host, gpu, wide, "nvlink_down", severity,
                        f"{{gpu}} has NVLinks down: {least:.0f} of {present:.0f} active{than}",
                        _DOWN_ADVICE.format(gpu=gpu), GpuLinksEvidence(
                            nvlink_links=present, nvlink_active_min=least,
                            nvlink_active_last=float(rows["nvlink_active"].iloc[-1]), peers_nvlink_active=peer_active,
                            share_of_samples=round(float(bad.mean()), 4), first_down_ns=int(worst.index[0])),
                        analyzer=ANALYZER)]


def _pcie_replay(ctx: GpuContext, host: str, gpu: int, wide: pd.DataFrame) -> list[Finding]:
    replay, seconds, first = _rise(wide, "pcie_replay")
    if replay <= 0:
        return []
    per_min = 60 * _rate(replay, seconds)
    severity = Severity.WARNING if per_min >= threshold("gpu_links.pcie_replay_per_min") else Severity.INFO
    return [gpu_finding(ctx, host, gpu, wide, "pcie_replay", severity,
                        f"{{gpu}} PCIe replay counter rose by {replay:,.0f} in {seconds:.0f} s ({per_min:,.1f}/min)",
                        _PCIE_ADVICE.format(gpu=gpu), GpuLinksEvidence(
                            pcie_replay_increase=replay, rate_per_min=round(per_min, 3), first_rise_ns=first,
                            window_s=round(seconds, 3), threshold_per_min=threshold("gpu_links.pcie_replay_per_min")),
                        analyzer=ANALYZER)]


def analyze_gpu_links(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    if not gpu_counters(store)["name"].isin(LINK_METRICS).any():
        return []
    ctx = analysis.view(GpuContext)
    return [f for (host, gpu), wide in sorted(ctx.wide.items()) if len(wide)
            for f in (*_nvlink_errors(ctx, host, gpu, wide), *_links_down(ctx, host, gpu, wide),
                      *_pcie_replay(ctx, host, gpu, wide))]

