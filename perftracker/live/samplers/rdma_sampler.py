"""Sample RDMA port counters from sysfs into `counters/<host>.rdma.jsonl` (read-only, cheap).

RoCE ports with a netdev also get the flow-control counters of `ethtool -S` (`"ethtool"`), through
`ethtool_reader`. No RDMA devices, or no ethtool: one note, and the rest goes on.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perftracker.collectors.counters.ethtool import flow_control, read_ethtool
from perftracker.collectors.counters.rdma import snapshot
from perftracker.live.sampler import LiveContext, append_records

EthtoolReader = Callable[[str], dict[str, int] | None]


def _roce(rec: dict[str, Any]) -> bool:
    return str(rec.get("link_layer", "")).strip().lower() == "ethernet" and bool(rec.get("netdevs"))


@dataclass(slots=True, eq=False)
class RdmaSampler:
    name = "rdma"
    interval_s: float = 5.0
    ethtool_reader: EthtoolReader | None = None
    ports: int = field(default=0, init=False)
    samples: int = field(default=0, init=False)
    enabled: bool = field(default=True, init=False)
    pfc_ports: int = field(default=0, init=False)
    _netdev: dict[tuple[str, str], str] = field(default_factory=dict, init=False)

    def start(self, ctx: LiveContext) -> None:
        first = snapshot(ctx.sysfs_root, ctx.host)
        self.ports = len(first)
        if not first:
            self.enabled = False
            ctx.note(f"RDMA: no RDMA devices under {ctx.sysfs_root}/class/infiniband; port counters are not sampled")
            return
        roce = [r for r in first if _roce(r)]
        if roce and self.ethtool_reader is None:
            if shutil.which("ethtool") is None:
                names = ", ".join(sorted({str(r["netdevs"][0]) for r in roce}))
                ctx.note(f"RDMA: ethtool not found: PFC pause / discard counters of the RoCE port(s) ({names}) are "
                         "not sampled, only sysfs counters. Install ethtool (`apt-get install ethtool` / `dnf install "
                         "ethtool`) on the host, or save `ethtool -S <netdev>` periodically with a `date +%s.%N` line "
                         "before each and pass the file to analyze")
            else:
                self.ethtool_reader = read_ethtool

    def _ethtool(self, ctx: LiveContext, rec: dict[str, Any]) -> dict[str, int] | None:
        assert self.ethtool_reader is not None
        key = (str(rec["device"]), str(rec["port"]))
        known = self._netdev.get(key)
        if known == "":  # gave nothing the first time: not asked again every interval
            return None
        for netdev in [known] if known else [str(n) for n in rec["netdevs"]]:
            counters = self.ethtool_reader(netdev)
            if counters:
                self._netdev[key] = netdev
                return flow_control(counters)
        if known is None:
            self._netdev[key] = ""
            ctx.note(f"RDMA: `ethtool -S {rec['netdevs'][0]}` gave no counters (unknown device or no permission): PFC "
                     f"pause / discard counters of {key[0]} port {key[1]} are not sampled")
        return None

    def sample(self, ctx: LiveContext) -> None:
        if not self.enabled:
            return
        records = snapshot(ctx.sysfs_root, ctx.host)
        pfc = 0
        if self.ethtool_reader is not None:
            for rec in records:
                if _roce(rec):
                    counters = self._ethtool(ctx, rec)
                    if counters is not None:
                        rec["ethtool"] = counters
                        pfc += 1
        self.pfc_ports = max(self.pfc_ports, pfc)
        append_records(ctx.run_dir / "counters" / f"{ctx.host}.rdma.jsonl", records)
        self.samples += 1

    def stop(self, ctx: LiveContext) -> None:
        return None

    def status(self) -> str:
        if not self.enabled:
            return "no RDMA devices"
        pfc = f", PFC counters of {self.pfc_ports}" if self.pfc_ports else ""
        return f"{self.ports} port(s){pfc}, {self.samples} sample(s)"
