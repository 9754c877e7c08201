"""GPU health samples: `<run>/counters/<host>.gpu.jsonl` and `nvidia-smi --query-gpu ... --format=csv`.

Promise: both loaders return `counters` rows (device "gpu:<index>", name a metric of the record, one row per XID
number) and `devices` rows (kind "gpu", uuid, PCI bus id, NUMA node, the job's ranks on it); missing or
"[N/A]" fields are skipped. Record format and units: docs/internals/collectors.md.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perftracker.bounded import LineBlocks, iter_lines
from perftracker.collectors.counters.dump_lines import MAX_TS_NS, device_row
from perftracker.collectors.file_notes import records
from perftracker.store import LoadNote
from perftracker.values import finite, int_in, rank_in_range

# nvidia-smi --query-gpu field (units stripped) -> metric name
SMI_FIELDS: dict[str, str] = {
    "clocks.current.sm": "sm_clock_mhz", "clocks.sm": "sm_clock_mhz",
    "clocks.current.memory": "mem_clock_mhz", "clocks.mem": "mem_clock_mhz",
    "clocks.max.sm": "max_sm_clock_mhz", "clocks.max.sm_clock": "max_sm_clock_mhz",
    "power.draw": "power_w", "power.draw.average": "power_w",
    "power.limit": "power_limit_w", "enforced.power.limit": "power_limit_w",
    "temperature.gpu": "temp_c",
    "utilization.gpu": "util_gpu_pct", "utilization.memory": "util_mem_pct",
    "clocks_event_reasons.active": "clock_event_reasons", "clocks_throttle_reasons.active": "clock_event_reasons",
    "pcie.link.gen.current": "pcie_gen", "pcie.link.gen.gpucurrent": "pcie_gen",
    "pcie.link.width.current": "pcie_width",
    "pcie.link.gen.max": "pcie_max_gen", "pcie.link.gen.gpumax": "pcie_max_gen",
    "pcie.link.width.max": "pcie_max_width",
    "ecc.errors.corrected.volatile.total": "ecc_sbe", "ecc.errors.uncorrected.volatile.total": "ecc_dbe",
}
# per-reason columns ("Active" / "Not Active") -> NVML bit
SMI_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
}
_NUM = re.compile(r"^\s*(0x[0-9a-fA-F]+|-?[\d.]+)")


_MAX_GPU = 1 << 16


def _record(rec: dict[str, Any], default_host: str, source: str
            ) -> tuple[list[dict[str, Any]], dict[str, Any], set[int]] | None:
    """(counter rows, device row, ranks on the GPU) of one GPU sample record, or None when it is not one (or out
    of range)."""
    gpu, ts, metrics = int_in(rec.get("gpu"), 0, _MAX_GPU), int_in(rec.get("ts_ns"), 0, MAX_TS_NS), rec.get("metrics")
    if gpu is None or ts is None or not isinstance(metrics, (dict, type(None))):
        return None
    host = str(rec.get("host") or default_host)
    base = {"host": host, "rank": -1, "device": f"gpu:{gpu}", "port": "", "ts_ns": ts}
    rows = []
    for name, value in (metrics or {}).items():
        if name == "xid":
            for x in value if isinstance(value, list) else [value]:
                number = finite(x)
                if number:
                    rows.append({**base, "name": "xid", "value": number})
        elif (number := finite(value)) is not None:
            rows.append({**base, "name": str(name), "value": number})
    numa = int_in(rec.get("numa_node"), -1, _MAX_GPU)
    device = device_row(host, "gpu", f"gpu:{gpu}", source, uuid=str(rec.get("uuid", "")),
                        pci_bus_id=str(rec.get("pci_bus_id", "")), numa_node=-1 if numa is None else numa)
    ranks = rec.get("ranks")
    return rows, device, {r for r in map(rank_in_range, ranks) if r is not None} if isinstance(ranks, list) else set()


def load_gpu_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) of one `<host>.gpu.jsonl` file."""
    host = path.name.split(".")[0]
    found, bad, cut = records(path, lambda n, rec: _record(rec, host, f"{path}:{n}"))
    rows: list[dict[str, Any]] = []
    devices: dict[tuple[str, str], dict[str, Any]] = {}
    ranks: dict[tuple[str, str], set[int]] = {}
    for r, device, on_gpu in found:
        rows.extend(r)
        key = (device["host"], device["device"])
        devices.setdefault(key, device)
        ranks.setdefault(key, set()).update(on_gpu)
    for key, on_gpu in ranks.items():
        devices[key]["ranks"] = ",".join(map(str, sorted(on_gpu)))
    notes = [LoadNote("warning", str(path), f"{len(bad)} line(s) are not GPU samples (or hold a GPU index or time "
                      "out of range) and were skipped")] if bad else []
    return rows, list(devices.values()), notes + cut


def _field(header: str) -> str:
    """A CSV header without its unit: `clocks.sm [MHz]` -> `clocks.sm` (string operations: linear)."""
    text = header.strip()
    start = text.rfind("[")
    if text.endswith("]") and start >= 0 and "]" not in text[start + 1:-1]:
        text = text[:start]
    return text.strip().lower()


def looks_like_smi_csv(head: str) -> bool:
    """True when the first line is an nvidia-smi --query-gpu CSV header with a timestamp and an index."""
    first = head.splitlines()[0] if head else ""
    fields = {_field(f) for f in first.split(",")}
    return "timestamp" in fields and "index" in fields and bool(fields & (set(SMI_FIELDS) | {"uuid", "pci.bus_id"}))


def _value(text: str) -> float | None:
    """The number a CSV cell starts with (decimal or 0x hex), when finite, else None."""
    m = _NUM.match(text)
    if not m:
        return None
    raw = m.group(1)
    try:
        return finite(int(raw, 16)) if raw.lower().startswith("0x") else finite(float(raw))
    except ValueError:
        return None


def _timestamp_ns(text: str) -> int | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S.%f"):
        try:
            dt = datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return int(dt.timestamp() * 1e6) * 1000
    return None


def load_smi_csv(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) of an `nvidia-smi --query-gpu=... --format=csv [-l N]` file."""
    host = path.name.split(".")[0]
    header: list[str] = []
    rows: list[dict[str, Any]] = []
    devices: dict[tuple[str, int], dict[str, Any]] = {}
    bad = 0
    blocks = LineBlocks(path)
    for _, line in iter_lines(blocks):  # one CSV row per line (nvidia-smi quotes no newlines); lines are cut
        try:                            # at MAX_LINE_CHARS, below csv's field limit
            cells = next(csv.reader([line], skipinitialspace=True), [])
        except csv.Error:
            bad += 1
            continue
        if not cells:
            continue
        fields = [_field(c) for c in cells]
        if "timestamp" in fields and "index" in fields:
            header = fields
            continue
        if not header or len(cells) != len(header):
            bad += 1
            continue
        rec = dict(zip(header, (c.strip() for c in cells)))
        ts = _timestamp_ns(rec.get("timestamp", "")[:64])
        gpu = _value(rec.get("index", ""))
        if ts is None or gpu is None or not 0 <= gpu <= _MAX_GPU:
            bad += 1
            continue
        base = {"host": host, "rank": -1, "device": f"gpu:{int(gpu)}", "port": "", "ts_ns": ts}
        rows.extend({**base, "name": SMI_FIELDS[name], "value": value} for name, text in rec.items()
                    if name in SMI_FIELDS and (value := _value(text)) is not None)
        reasons = [(SMI_REASON_BITS[r], text.strip().lower() == "active") for name, text in rec.items()
                   if name.startswith(("clocks_event_reasons.", "clocks_throttle_reasons."))
                   and (r := name.split(".", 1)[1]) in SMI_REASON_BITS]
        if reasons and "clock_event_reasons" not in {SMI_FIELDS.get(n) for n in rec}:  # per-reason columns only
            rows.append({**base, "name": "clock_event_reasons", "value": float(sum({b for b, on in reasons if on}))})
        devices.setdefault((host, int(gpu)), device_row(host, "gpu", f"gpu:{int(gpu)}", str(path),
                                                        uuid=rec.get("uuid", ""), pci_bus_id=rec.get("pci.bus_id", "")))
    notes = [LoadNote("warning", str(path), f"{bad} nvidia-smi CSV line(s) could not be read and were skipped")] \
        if bad else []
    notes.extend(LoadNote("warning", str(path), n) for n in blocks.stats.notes(blocks.cap))
    return rows, list(devices.values()), notes
