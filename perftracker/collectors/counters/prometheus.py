"""Prometheus text exposition samples: a parser, and the node exporter / DCGM exporter mappings.

Promise: `parse_text(text)` returns every sample line as a `Sample` (timed by its own timestamp, else the latest
`# scrape_time` comment, else -1); `load_exposition` maps the node exporter / DCGM exporter samples onto the
names and units of `counters/rdma.py` and `counters/gpu_samples.py`. Mappings: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perftracker.bounded import MAX_LINE_CHARS, read_text
from perftracker.collectors.counters.dump_lines import MAX_TS_NS, device_row
from perftracker.collectors.file_notes import cut_notes, line_list
from perftracker.store import LoadNote
from perftracker.values import ascii_int, finite

# Linear on any line: the label set is bounded (a real one is a few hundred characters) and holds no
# braces; a label name starts only where no name character precedes it.
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^{}]{0,8192})\})?\s+(?P<value>\S+)"
                   r"(?:\s+(?P<ts>-?\d{1,19}))?\s*$")
_LABEL = re.compile(r'(?<![a-zA-Z0-9_])([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SCRAPE = re.compile(r"^#\s*scrape_time\s+(?P<t>[\d.]+)")

# node exporter infiniband metric (without the node_infiniband_ prefix) -> sysfs counter name, and the scales of
# those not in the sysfs unit (data in octets / 4, a rate in Gb/s)
NODE_IB: dict[str, str] = {
    "port_data_received_bytes_total": "port_rcv_data", "port_data_transmitted_bytes_total": "port_xmit_data",
    "port_packets_received_total": "port_rcv_packets", "port_packets_transmitted_total": "port_xmit_packets",
    "port_transmit_wait_total": "port_xmit_wait", "link_downed_total": "link_downed",
    "link_error_recovery_total": "link_error_recovery", "symbol_error_total": "symbol_error",
    "port_errors_received_total": "port_rcv_errors", "port_discards_transmitted_total": "port_xmit_discards",
    "port_receive_remote_physical_errors_total": "port_rcv_remote_physical_errors",
    "port_receive_switch_relay_errors_total": "port_rcv_switch_relay_errors",
    "local_link_integrity_errors_total": "local_link_integrity_errors",
    "excessive_buffer_overrun_errors_total": "excessive_buffer_overrun_errors",
    "port_transmit_constraint_errors_total": "port_xmit_constraint_errors",
    "port_receive_constraint_errors_total": "port_rcv_constraint_errors", "vl15_dropped_total": "VL15_dropped",
    "unicast_packets_received_total": "unicast_rcv_packets",
    "unicast_packets_transmitted_total": "unicast_xmit_packets",
    "multicast_packets_received_total": "multicast_rcv_packets",
    "multicast_packets_transmitted_total": "multicast_xmit_packets", "state_id": "state_id",
    "physical_state_id": "phys_state_id", "rate_bytes_per_second": "rate_gbps",
}
NODE_IB_SCALE = {"port_data_received_bytes_total": 0.25, "port_data_transmitted_bytes_total": 0.25,
                 "rate_bytes_per_second": 8e-9}

# DCGM exporter field -> GPU metric name (those of gpu_samples.py)
DCGM: dict[str, str] = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "max_sm_clock_mhz",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_GPU_UTIL": "util_gpu_pct",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "util_mem_pct",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "pcie_gen",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "pcie_width",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": "pcie_max_gen",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": "pcie_max_width",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc_flit",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "nvlink_crc_data",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "nvlink_replay",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "nvlink_recovery",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_us",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_us",
}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    ts_ns: int


def parse_text(text: str, skipped: list[int] | None = None) -> list[Sample]:
    """Every sample of a Prometheus text exposition (several scrapes may be concatenated).

    Samples whose value is not a finite number or whose time is out of range (past year 2100) are
    skipped; their line numbers go to `skipped` when given. Lines are read at most MAX_LINE_CHARS long.
    """
    out: list[Sample] = []
    scrape_ns = -1
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw[:MAX_LINE_CHARS].strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _SCRAPE.match(line)
            if m:
                seconds = finite(_float(m.group("t")))
                scrape_ns = int(seconds * 1e9) if seconds is not None and 0 <= seconds * 1e9 < MAX_TS_NS else -1
            continue
        m = _LINE.match(line)
        if not m:
            continue
        value = finite(_float(m.group("value")))
        ts_ms = ascii_int(m.group("ts"), 0, MAX_TS_NS // 1_000_000) if m.group("ts") else None
        if value is None or (m.group("ts") and ts_ms is None):
            if skipped is not None:
                skipped.append(lineno)
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group("labels") or "")}
        ts = ts_ms * 1_000_000 if ts_ms is not None else scrape_ns
        out.append(Sample(m.group("name"), labels, value, ts))
    return out


def _float(text: str) -> float | None:
    try:
        return float(text[:64])
    except ValueError:
        return None


def looks_like_exposition(head: str) -> bool:
    """True when a text holds node_infiniband_* or DCGM_FI_* samples."""
    return any(line.startswith(("node_infiniband_", "DCGM_FI_")) for line in head.splitlines()[:400])


def host_of(labels: dict[str, str], default: str) -> str:
    if labels.get("Hostname"):
        return labels["Hostname"]
    inst = labels.get("instance", "")
    if inst:
        return inst.rsplit(":", 1)[0] if inst.count(":") == 1 else inst
    return default


def load_exposition(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) of node exporter infiniband and DCGM exporter samples, in the names and
    units of the RDMA and GPU samples; samples without a time are skipped with a note."""
    text, capped = read_text(path)
    skipped: list[int] = []
    samples = parse_text(text, skipped)
    notes = cut_notes(path, capped)
    if skipped:
        notes.append(LoadNote("warning", str(path), f"{len(skipped)} sample line(s) with a value or time that is not a "
                              f"finite number in range were skipped (line {line_list(skipped)})",
                              {"lines": skipped[:50]}))
    if any(s.ts_ns < 0 for s in samples):
        notes.append(LoadNote("warning", str(path), "Prometheus samples without a timestamp or a preceding "
                              "`# scrape_time <unix seconds>` line were skipped: rates need sample times"))
    rows: list[dict[str, Any]] = []
    devices: dict[tuple[str, str, str], dict[str, Any]] = {}
    for s in (s for s in samples if s.ts_ns >= 0):
        host, short, metric = host_of(s.labels, path.name.split(".")[0]), s.name[len("node_infiniband_"):], DCGM.get(s.name)
        if s.name.startswith("node_infiniband_") and "device" in s.labels and short != "info":
            dev, port, value = s.labels["device"], s.labels.get("port", "1"), s.value * NODE_IB_SCALE.get(short, 1.0)
            name = NODE_IB.get(short, short[:-6] if short.endswith("_total") else short)
            device = device_row(host, "nic", dev, "prometheus", port)
        elif metric is not None and "gpu" in s.labels and not (metric == "xid" and s.value == 0):
            dev, port, name, value = f"gpu:{s.labels['gpu']}", "", metric, s.value
            device = device_row(host, "gpu", dev, "prometheus", uuid=s.labels.get("UUID", ""),
                                pci_bus_id=s.labels.get("pci_bus_id", ""))
        else:
            continue
        rows.append({"host": host, "rank": -1, "device": dev, "port": port, "name": name, "ts_ns": s.ts_ns,
                     "value": value})
        devices.setdefault((host, dev, port), device)
    return rows, sorted(devices.values(), key=lambda d: d["kind"] != "nic"), notes
