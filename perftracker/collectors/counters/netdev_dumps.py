"""Ethernet interface counters from the files users already have, and the net part of `analyze`'s inputs.

Promise: `looks_like_*` tell repeated `ip -s link` outputs, sysfs `grep -H` dumps and node exporter text apart;
their loaders (and `netdev.load_net_jsonl`'s) return (netdev rows, net_ifaces rows, notes), files without a
time skipped with a note; `net_tables` makes the two tables. Formats: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import LineBlocks, iter_lines, read_text
from perftracker.collectors.counters import netdev, prometheus
from perftracker.collectors.counters.dump_lines import iface_row, named_host, stamp
from perftracker.store import LoadNote
from perftracker.store.schema import conform

_LINK = re.compile(r"^\d+:\s+(?P<name>[^:@\s]+)(?:@\S+)?:\s+<(?P<flags>[^>]*)>(?P<rest>.*)$")
_BLOCK = re.compile(r"^\s+(?P<dir>RX|TX)(?P<errors>\s+errors)?:\s+(?P<names>.+)$")
_SYSFS = re.compile(r"^(?:\S*/)?class/net/(?P<iface>[^/\s]+)/(?:(?P<stats>statistics)/)?(?P<file>[a-z_]+)"
                    r"(?::|\s+)(?P<value>\S+)\s*$")
_RX = {"bytes": "rx_bytes", "packets": "rx_packets", "errors": "rx_errors", "dropped": "rx_dropped",
       "missed": "rx_missed_errors", "overrun": "rx_over_errors", "mcast": "multicast",
       "length": "rx_length_errors", "crc": "rx_crc_errors", "frame": "rx_frame_errors", "fifo": "rx_fifo_errors",
       "nohandler": "rx_nohandler", "otherhost": "rx_otherhost_dropped"}
_TX = {"bytes": "tx_bytes", "packets": "tx_packets", "errors": "tx_errors", "dropped": "tx_dropped",
       "carrier": "tx_carrier_errors", "collsns": "collisions", "aborted": "tx_aborted_errors",
       "fifo": "tx_fifo_errors", "window": "tx_window_errors", "heartbt": "tx_heartbeat_errors",
       "transns": "carrier_changes"}
NODE_NETWORK: dict[str, str] = {  # node exporter metric (no node_network_ prefix) -> row name
    "receive_bytes_total": "rx_bytes", "transmit_bytes_total": "tx_bytes", "receive_packets_total": "rx_packets",
    "transmit_packets_total": "tx_packets", "receive_errs_total": "rx_errors", "transmit_errs_total": "tx_errors",
    "receive_drop_total": "rx_dropped", "transmit_drop_total": "tx_dropped", "receive_fifo_total": "rx_fifo_errors",
    "transmit_fifo_total": "tx_fifo_errors", "receive_frame_total": "rx_frame_errors",
    "receive_multicast_total": "multicast", "transmit_colls_total": "collisions",
    "transmit_carrier_total": "tx_carrier_errors", "carrier_changes_total": "carrier_changes",
    "carrier_up_changes_total": "carrier_up_count", "carrier_down_changes_total": "carrier_down_count",
    "up": "operstate_up", "carrier": "carrier", "speed_bytes": "speed_mbps", "mtu_bytes": "mtu",
}
NODE_NETWORK_SCALE = {"speed_bytes": 8e-6}  # speed in bytes/s -> Mbit/s


def looks_like_ip_link(head: str) -> bool:
    lines = head.splitlines()[:80]
    return any(_LINK.match(line) for line in lines) and any(_BLOCK.match(line) for line in lines)


def looks_like_sysfs_net_dump(head: str) -> bool:
    return any(_SYSFS.match(line.strip()) for line in head.splitlines()[:80])


def looks_like_node_network(head: str) -> bool:
    return any(line.startswith("node_network_") for line in head.splitlines()[:2000])


class _Samples:
    """Interface records of a text dump: (ts, iface) -> record, in the `.net.jsonl` iface shape."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.ts: int | None = None
        self.records: dict[tuple[int, str], dict[str, Any]] = {}

    def iface(self, name: str) -> dict[str, Any] | None:
        if self.ts is None:
            return None
        return self.records.setdefault((self.ts, name), {"counters": {}})

    def finish(self, path: Path, what: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
        """(netdev rows, net_ifaces rows, notes) of a text dump; without a time line, a note says it was skipped."""
        rows: list[dict[str, Any]] = []
        ifaces: dict[str, dict[str, Any]] = {}
        for (ts, name), data in sorted(self.records.items()):
            rows.extend(netdev.iface_rows(self.host, name, data, ts))
            ifaces.setdefault(name, iface_row(self.host, name, str(path)))
        notes = [] if rows else [LoadNote("warning", str(path), f"{what} without time lines (`date +%s.%N` or "
                                          "`# ts_ns=N` before each) was skipped: rates need sample times")]
        return rows, list(ifaces.values()), notes


def _header(text: str, samples: _Samples) -> bool:
    """Epoch and host lines of a dump; True when the line was one."""
    if (named := named_host(text)) is not None:
        samples.host = named
        return True
    if (at := stamp(text)) is not None:
        samples.ts = at
        return True
    return False


def load_ip_link_dump(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(netdev rows, net_ifaces rows, notes) of repeated `ip -s link` outputs with epoch lines."""
    samples = _Samples(path.name.split(".")[0])
    current: dict[str, Any] | None = None
    pending: tuple[dict[str, str], list[str]] | None = None
    for _, raw in iter_lines(LineBlocks(path)):  # regular files only, under the cap, lines cut
        line = raw.rstrip("\n")
        if _header(line.strip(), samples):
            current = pending = None
            continue
        link = _LINK.match(line)
        if link:
            current = samples.iface(link.group("name"))
            pending = None
            if current is not None:
                flags = set(link.group("flags").split(","))
                current["admin_up"] = "UP" in flags
                current["carrier"] = 1 if "LOWER_UP" in flags else 0
                state = re.search(r"\bstate (\S+)", link.group("rest"))
                mtu = re.search(r"\bmtu (\d+)", link.group("rest"))
                if state:
                    current["operstate"] = state.group(1).lower()
                if mtu:
                    current["mtu"] = int(mtu.group(1))
            continue
        block = _BLOCK.match(line)
        if block and current is not None:
            names = _RX if block.group("dir") == "RX" else _TX
            pending = (names, block.group("names").split())
            continue
        if pending is not None and current is not None:
            names, columns = pending
            for column, value in zip(columns, line.split()):
                if column in names and value.isdigit():
                    current["counters"][names[column]] = int(value)
            pending = None
    return samples.finish(path, "`ip -s link` output")


def load_sysfs_net_dump(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(netdev rows, net_ifaces rows, notes) of repeated `grep -H .` dumps of /sys/class/net files."""
    samples = _Samples(path.name.split(".")[0])
    for _, raw in iter_lines(LineBlocks(path)):  # regular files only, under the cap, lines cut
        text = raw.strip()
        if _header(text, samples):
            continue
        m = _SYSFS.match(text)
        if not m:
            continue
        data = samples.iface(m.group("iface"))
        if data is None:
            continue
        name, value = m.group("file"), m.group("value")
        if name == "operstate":
            data["operstate"] = value.lower()
        elif name == "flags" and value.startswith("0x"):
            data["admin_up"] = bool(int(value, 16) & netdev.IFF_UP)
        elif value.lstrip("-").isdigit():
            number = int(value)
            if name in ("carrier", "mtu"):
                data[name] = number
            elif name == "speed":
                data["speed_mbps"] = number
            elif m.group("stats") or name.startswith("carrier_"):
                data["counters"][name] = number
    return samples.finish(path, "/sys/class/net dump")


def load_node_network(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(netdev rows, net_ifaces rows, notes) of node exporter `node_network_*` / `node_netstat_Tcp*` samples."""
    samples = prometheus.parse_text(read_text(path)[0])
    default = path.name.split(".")[0]
    rows: list[dict[str, Any]] = []
    ifaces: dict[tuple[str, str], dict[str, Any]] = {}
    untimed = 0
    for s in samples:
        if s.ts_ns < 0:
            untimed += s.name.startswith(("node_network_", "node_netstat_Tcp"))
            continue
        host = prometheus.host_of(s.labels, default)
        for prefix in ("node_netstat_Tcp_", "node_netstat_TcpExt_"):
            if s.name.startswith(prefix) and s.name[len(prefix):] in netdev.TCP_NAMES:
                rows.append({"host": host, "iface": "", "name": netdev.TCP_PREFIX + s.name[len(prefix):],
                             "ts_ns": s.ts_ns, "value": s.value})
        if not s.name.startswith("node_network_") or "device" not in s.labels:
            continue
        dev, short = s.labels["device"], s.name[len("node_network_"):]
        if short == "info":
            up = {"up": 1.0, "down": 0.0, "lowerlayerdown": 0.0}.get(s.labels.get("operstate", "").lower())
            name, value = ("operstate_up" if up is not None else None), up if up is not None else 0.0
        else:
            name, value = NODE_NETWORK.get(short), s.value * NODE_NETWORK_SCALE.get(short, 1.0)
        if name is None:
            continue
        rows.append({"host": host, "iface": dev, "name": name, "ts_ns": s.ts_ns, "value": value})
        ifaces.setdefault((host, dev), iface_row(host, dev, str(path)))
    notes = [LoadNote("warning", str(path), f"{untimed} node exporter network sample(s) without a timestamp or a "
                      "preceding `# scrape_time <unix seconds>` line were skipped: rates need sample times")] \
        if untimed else []
    return rows, list(ifaces.values()), notes


def net_tables(rows: list[dict[str, Any]], ifaces: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """The {"netdev", "net_ifaces"} tables of every network reader's rows: a sample's row once, an interface once."""
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.drop_duplicates(["host", "iface", "name", "ts_ns"], keep="last")
        frame = frame.sort_values(["host", "iface", "name", "ts_ns"], kind="stable")
    iface_frame = pd.DataFrame(ifaces)
    if not iface_frame.empty:  # the reason and peers of the last sample that had them
        iface_frame = iface_frame.sort_values(["why", "peers"], key=lambda s: s.str.len(), kind="stable")
        iface_frame = iface_frame.drop_duplicates(["host", "iface"], keep="last").sort_values(["host", "iface"])
    return {"netdev": conform("netdev", frame), "net_ifaces": conform("net_ifaces", iface_frame)}
