"""Helpers for the host-health tests: a fake sysfs RDMA tree whose counters evolve, and sample writers."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perftracker.analyzers.health.rdma import WRAP_32
from perftracker.collectors.counters.inputs import load_counter_inputs
from perftracker.collectors.counters.rdma import snapshot
from perftracker.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "health"
T0_NS = 1_800_000_000_000_000_000

COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_xmit_discards",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_xmit_data", "port_rcv_data",
            "port_xmit_packets", "port_rcv_packets", "port_xmit_wait")
HW_COUNTERS = ("out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
               "req_transport_retries_exceeded", "rp_cnp_handled", "rp_cnp_ignored", "np_cnp_sent",
               "np_ecn_marked_roce_packets")


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


class FakeRdmaNode:
    """A fake /sys with RDMA devices laid out like the kernel's (PCI dir + relative class symlink).

    `tick(seconds, gbps=...)` advances every port's counters as if it carried that traffic
    (port_*_data in octets / 4), plus any extra increases given per device (32-bit queue counters
    wrap as the hardware's do); `snap()` returns the
    perftracker snapshot records at the current fake time. Device i's netdev is `<netdev>i`
    (`ib0`; pass netdev="eth" and link_layer="Ethernet" for a RoCE node).
    """

    def __init__(self, root: Path, host: str, devices: Iterable[str] = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"),
                 rate: str = "400 Gb/sec (4X NDR)", link_layer: str = "InfiniBand", netdev: str = "ib") -> None:
        self.root, self.host, self.now_ns = root, host, T0_NS
        self.values: dict[str, dict[str, int]] = {}
        self.devices = list(devices)
        for i, dev in enumerate(self.devices):
            pci = root / "devices" / "pci0000:00" / f"0000:{0x17 + i:02x}:00.0"
            ib = pci / "infiniband" / dev
            _w(pci / "numa_node", str(i // 2))
            _w(pci / "net" / f"{netdev}{i}" / "operstate", "up")
            _w(ib / "node_type", "1: CA")
            link = root / "class" / "infiniband" / dev
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path("../..") / "devices" / "pci0000:00" / pci.name / "infiniband" / dev)
            (ib / "device").symlink_to(Path("../.."))
            self.values[dev] = {n: 0 for n in COUNTERS + HW_COUNTERS}
            self.set_port(dev, state="4: ACTIVE", rate=rate, link_layer=link_layer)
            _w(ib / "ports" / "1" / "hw_counters" / "lifespan", "10")
        self.write()

    def port_dir(self, dev: str) -> Path:
        return self.root / "class" / "infiniband" / dev / "ports" / "1"

    def set_port(self, dev: str, **fields: str) -> None:
        for name, text in fields.items():
            _w(self.port_dir(dev) / name, text)
        if "state" in fields:
            _w(self.port_dir(dev) / "phys_state", "5: LinkUp" if "ACTIVE" in fields["state"] else "3: Disabled")

    def write(self) -> None:
        for dev, values in self.values.items():
            for name, value in values.items():
                group = "counters" if name in COUNTERS else "hw_counters"
                _w(self.port_dir(dev) / group / name, str(value % 2**32 if name in WRAP_32 else value))

    def tick(self, seconds: float, gbps: dict[str, float] | float = 100.0,
             extra: dict[str, dict[str, int]] | None = None) -> None:
        self.now_ns += int(seconds * 1e9)
        for dev, values in self.values.items():
            rate = gbps.get(dev, 0.0) if isinstance(gbps, dict) else gbps
            words = int(rate * 1e9 / 8 * seconds / 4)
            values["port_xmit_data"] += words
            values["port_rcv_data"] += words
            values["port_xmit_packets"] += words // 1024
            values["port_rcv_packets"] += words // 1024
            for name, inc in (extra or {}).get(dev, {}).items():
                values[name] += inc
        self.write()

    def snap(self) -> list[dict[str, Any]]:
        return snapshot(self.root, self.host, ts_ns=self.now_ns)


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec) + "\n")
    return path


def gpu_record(host: str, gpu: int, ts_ns: int, **metrics: Any) -> dict[str, Any]:
    """A gpu.jsonl record with healthy H100-like defaults, overridden by `metrics`."""
    base: dict[str, Any] = {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "max_sm_clock_mhz": 1980, "power_w": 640.0,
                            "power_limit_w": 700.0, "temp_c": 62, "util_gpu_pct": 97, "util_mem_pct": 40,
                            "clock_event_reasons": 0, "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5,
                            "pcie_max_width": 16, "ecc_sbe": 0, "ecc_dbe": 0}
    base.update(metrics)
    return {"ts_ns": ts_ns, "host": host, "gpu": gpu, "uuid": f"GPU-0000-{gpu:04d}",
            "pci_bus_id": f"00000000:{0x18 + gpu:02X}:00.0", "numa_node": gpu // 2, "metrics": base}


ETHTOOL_FIXTURE = FIXTURES / "node-r.mlx5-roce.ethtool-S.txt"


class FakeEthtool:
    """`ethtool -S` of fake mlx5 RoCE netdevs: every netdev starts from the fixture's counters (a real-looking
    ConnectX output, hundreds of per-queue lines included); `add(netdev, name=inc, ...)` advances counters;
    calling it is the sampler's `ethtool_reader` (None for an unknown netdev); `text(netdev)` renders the
    `ethtool -S` output with the current values. `without` drops counters (a driver that lacks them)."""

    def __init__(self, netdevs: Iterable[str], without: Iterable[str] = ()) -> None:
        from perftracker.collectors.counters.ethtool import parse_ethtool_stats

        self.lines = ETHTOOL_FIXTURE.read_text().splitlines()
        base = {n: v for n, v in parse_ethtool_stats("\n".join(self.lines)).items() if n not in set(without)}
        self.values = {nd: dict(base) for nd in netdevs}
        self.calls: list[str] = []

    def add(self, netdev: str, **increments: int) -> None:
        for name, inc in increments.items():
            self.values[netdev][name] += inc

    def __call__(self, netdev: str) -> dict[str, int] | None:
        self.calls.append(netdev)
        return dict(self.values[netdev]) if netdev in self.values else None

    def text(self, netdev: str) -> str:
        vals = self.values[netdev]
        out = [self.lines[0]]
        for line in self.lines[1:]:
            name = line.split(":", 1)[0].strip()
            if name in vals:
                out.append(f"     {name}: {vals[name]}")
        return "\n".join(out) + "\n"


def counter_store(paths: list[Path]) -> Store:
    """A Store holding what the counter loaders read from `paths` (tables and notes)."""
    tables, notes, _ = load_counter_inputs(paths)
    store = Store()
    for name, frame in tables.items():
        store.set_table(name, frame)
    store.add_notes(notes)
    return store
