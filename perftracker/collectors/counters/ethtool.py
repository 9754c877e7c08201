"""NIC flow-control counters from `ethtool -S <netdev>`: PFC pauses, discards, buffer and ECN counters.

Promise: `parse_ethtool_stats(text)` reads `ethtool -S` output into `{name: int}` (nothing evaluated);
`flow_control(counters)` keeps the port-level flow-control counters; `read_ethtool(netdev)` runs the tool and
never raises; `load_ethtool_dump` reads repeated dumps and `attach_to_ports` puts them on their RDMA ports.
Dump format and counter names: docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perftracker.bounded import LineBlocks, iter_lines
from perftracker.collectors.counters.dump_lines import device_row, named_host, stamp
from perftracker.store import LoadNote
from perftracker.values import ETHTOOL_COUNTER_PREFIX

PREFIX = ETHTOOL_COUNTER_PREFIX
TIMEOUT_S = 2.0
FLOW_CONTROL = re.compile(r"pause|pfc|xoff|xon|discard|buf|ecn|cnp|marked|storm|congest", re.IGNORECASE)
_PER_QUEUE = re.compile(r"^(?:[a-z]+_)?(?:rx|tx|ch|cq|sq|rq)\d+_|queue_?\d+|\[\d+\]|^(?:rx|tx)-\d+\.", re.IGNORECASE)
_U64 = 2**64 - 1
_NETDEV = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,63}$")
_COMMAND = re.compile(r"^(?:[#$>]\s*)?(?:sudo\s+)?ethtool\s+(?:-S|--statistics)\s+(?P<dev>\S+)\s*$")
_HEADER = "NIC statistics:"


def stat_line(line: str) -> tuple[str, int] | None:
    """`     name: 123` -> ("name", 123); None for any other line (string operations: linear in the line)."""
    name, colon, value = line.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not name:
        return None
    digits = value[1:] if value[:1] in "+-" else value
    if not 0 < len(digits) <= 20 or not digits.isascii() or not digits.isdigit():
        return None
    number = int(value)
    return (name, number) if -_U64 <= number <= _U64 else None


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """`{name: value}` of `ethtool -S` output; non-integer values and other lines are skipped."""
    return dict(stat for stat in map(stat_line, text.splitlines()) if stat is not None)  # the header is not one


def flow_control(counters: Mapping[str, int]) -> dict[str, int]:
    """The port-level pause / PFC / discard / buffer / ECN / CNP / storm counters of `counters` (no per-queue one)."""
    return {n: v for n, v in counters.items() if FLOW_CONTROL.search(n) and not _PER_QUEUE.search(n)}


def read_ethtool(netdev: str, timeout_s: float = TIMEOUT_S, ethtool: str = "ethtool") -> dict[str, int] | None:
    """Every counter `ethtool -S <netdev>` prints, or None when it cannot be read (never raises)."""
    if not _NETDEV.match(netdev):  # never pass something that looks like an option or a path
        return None
    try:
        done = subprocess.run([ethtool, "-S", netdev], capture_output=True, text=True, timeout=timeout_s,
                              check=False, env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if done.returncode != 0:
        return None
    return parse_ethtool_stats(done.stdout) or None


def looks_like_ethtool_dump(head: str) -> bool:
    """True when a text holds `ethtool -S` output ("NIC statistics:" followed by counter lines)."""
    lines = head.splitlines()[:400]
    return any(line.strip() == _HEADER for line in lines) and any(stat_line(line) for line in lines)


def load_ethtool_dump(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) of a text file of repeated `ethtool -S` outputs with epoch lines."""
    host = path.name.split(".")[0]
    ts: int | None = None
    netdev = ""
    blocks: list[tuple[int | None, str, dict[str, int]]] = []  # (time, netdev, counters) of each output
    current: dict[str, int] = {}

    def flush() -> None:
        if current:
            blocks.append((ts, netdev, dict(current)))
        current.clear()

    reader = LineBlocks(path)
    for _, raw in iter_lines(reader):
        line = raw.strip()
        cmd = _COMMAND.match(line)
        if (named := named_host(line)) is not None:
            host = named or host
        elif line.startswith("# netdev=") or cmd:
            flush()
            netdev = cmd.group("dev") if cmd else line[9:].strip()
        elif line.startswith("# ts_ns=") or stamp(line) is not None:
            flush()
            ts = stamp(line)
        elif line == _HEADER:
            flush()
        else:
            stat = stat_line(raw)
            if stat is not None:
                current[stat[0]] = stat[1]
    flush()
    notes: list[LoadNote] = [LoadNote("warning", str(path), n) for n in reader.stats.notes(reader.cap)]
    untimed = sum(when is None for when, _, _ in blocks)
    unnamed = sum(when is not None and not dev for when, dev, _ in blocks)
    if untimed:
        notes.append(LoadNote("warning", str(path), f"{untimed} `ethtool -S` output(s) without a preceding time line "
                              "(`date +%s.%N` or `# ts_ns=N`) were skipped: rates need sample times"))
    if unnamed:
        notes.append(LoadNote("warning", str(path), f"{unnamed} `ethtool -S` output(s) without a netdev were skipped: "
                              "add the command line (`echo ethtool -S <dev>`) or a `# netdev=<dev>` line"))
    kept = [(ts, dev, counters) for ts, dev, counters in blocks if ts is not None and dev]
    rows = [{"host": host, "rank": -1, "device": dev, "port": "1", "ts_ns": ts, "name": PREFIX + n, "value": float(v)}
            for ts, dev, counters in kept for n, v in flow_control(counters).items()]
    devices = {dev: device_row(host, "nic", dev, str(path), "1", link_layer="Ethernet", netdevs=dev) for _, dev, _ in kept}
    return rows, list(devices.values()), notes


def attach_to_ports(rows: list[dict[str, Any]], devices: list[dict[str, Any]],
                    sysfs_devices: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows / device rows of offline dumps moved from their netdev to the RDMA device / port whose sysfs
    record lists that netdev on the same host; netdevs without one stay as they are."""
    ports: dict[tuple[str, str], tuple[str, str]] = {}
    for d in sysfs_devices:
        if d.get("kind") == "nic":
            for nd in str(d.get("netdevs", "")).split(","):
                if nd:
                    ports.setdefault((str(d["host"]), nd), (str(d["device"]), str(d["port"])))
    moved = [{**r, "device": ports[key][0], "port": ports[key][1]} if (key := (str(r["host"]), str(r["device"])))
             in ports else r for r in rows]
    kept = [d for d in devices if (str(d["host"]), str(d["device"])) not in ports]
    return moved, kept
