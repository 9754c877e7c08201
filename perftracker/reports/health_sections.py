"""Report sections for host health: RDMA throughput / congestion and GPU clocks / temperature / power.

`rdma_section` and `gpu_section` return None without such samples; each lists its findings and, under each
straggler's root-cause chain, the causes.
"""

from __future__ import annotations

import math
from typing import Any

from perftracker.analyzers.findings import Finding
from perftracker.reports.health_charts import gpu_figures, rdma_figures
from perftracker.reports.sections import Section, Tables, listed, root_causes, table

ACTIVE = 4  # sysfs port state "4: ACTIVE"
MAX_PORT_ROWS = 64  # the rest of the ports are in tables/rdma_ports.parquet, named under the table
MAX_GPU_FINDINGS = 30


def _paused(priority: str, share: float, frames_per_s: float) -> str:
    """"20.0% (prio 3)": the most paused priority, or its pause frame rate without durations; "0" when none moved."""
    if not priority:
        return "0"
    amount = f"{100 * share:.1f}%" if not math.isnan(share) else f"{frames_per_s:,.0f}/s"
    return f"{amount} (prio {priority})"


def _port_row(r: Any, with_pfc: bool) -> list[str]:
    cells = [str(r.host), f"{r.device}/{r.port}"]
    if r.sampled:
        cells += ["ACTIVE" if r.state_id == ACTIVE else str(r.state_id), f"{r.rate_gbps:g}", f"{r.tx_gbps:.2f}",
                  f"{r.rx_gbps:.2f}", f"{r.cnp_per_s:,.0f}"]
    else:
        cells += ["", "", "", "", ""]
    if with_pfc:
        cells += ([_paused(r.pfc_rx_priority, r.pfc_rx_paused_share, r.pfc_rx_frames_per_s),
                   _paused(r.pfc_tx_priority, r.pfc_tx_paused_share, r.pfc_tx_frames_per_s)] if r.pfc else ["", ""])
    return cells


def rdma_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """Per-host RDMA throughput, congestion and PFC pauses over time, or None without RDMA samples."""
    ports = table(tables, "rdma_ports")
    if ports.empty:
        return None
    with_pfc = bool(ports["pfc"].any())
    head = ["host", "port", "state", "rate Gb/s", "tx Gb/s", "rx Gb/s", "CNP+ECN /s"]
    head += ["PFC rx paused", "PFC tx paused"] if with_pfc else []
    data = {
        "ports": {"head": head, "rows": [_port_row(r, with_pfc) for r in ports.head(MAX_PORT_ROWS).itertuples(index=False)],
                  "more": max(0, len(ports) - MAX_PORT_ROWS), "source": "rdma_ports"},
        "pfc": {"counters": with_pfc, "findings": listed(findings, ("rdma_pfc",))},
        "root_causes": root_causes(findings) if table(tables, "gpu_series").empty else [],
    }
    figures = rdma_figures(ports, table(tables, "rdma_throughput"), table(tables, "rdma_congestion"),
                           table(tables, "pfc_paused"))
    return Section("rdma", "RDMA ports", "section_rdma.html.j2", data, figures)


def gpu_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """Per-host GPU clocks, temperature and power over time with throttle periods shaded."""
    series = table(tables, "gpu_series")
    if series.empty:
        return None
    data = {"root_causes": root_causes(findings),
            "findings": listed(findings, ("gpu_health", "gpu_links"), MAX_GPU_FINDINGS)}
    return Section("gpu", "GPU health", "section_gpu.html.j2", data,
                   gpu_figures(series, table(tables, "gpu_throttle")))
