"""RDMA port counters: a sysfs snapshot, and loaders of the files that hold such snapshots.

Promise: `snapshot(sysfs_root, host)` reads every port of `<root>/class/infiniband/*` into one record per port
(unreadable files skipped); `load_rdma_jsonl(path)` and `load_sysfs_copies(paths)` read recorded samples and
raw sysfs copies into `counters` and `devices` rows. Record format and copy shapes: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from perftracker.bounded import LineBlocks, iter_lines
from perftracker.collectors.counters.dump_lines import MAX_TS_NS, device_row, epoch_ns, named_host, stamp
from perftracker.collectors.counters.sysfs import read_attr
from perftracker.collectors.file_notes import records
from perftracker.store import LoadNote
from perftracker.values import ETHTOOL_COUNTER_PREFIX as ETHTOOL_PREFIX
from perftracker.values import finite, int_in

RATE = re.compile(r"(?<![\d.])(?P<gbps>\d{1,9}(?:\.\d{1,9})?)\s*Gb/sec(?:\s*\((?P<width>\d{1,4})X\s*"
                  r"(?P<speed>[A-Z0-9]{0,16})\))?")
_STATE = re.compile(r"^\s*(?P<id>\d{1,9})\s*:")
_PORT_PATH = re.compile(r"^(?P<root>.*?)/(?:class/)?infiniband/(?P<dev>[^/]+)/ports/(?P<port>\d+)/"
                        r"(?P<rest>(?:hw_)?counters/[^/:]+|state|phys_state|rate|link_layer)$")
_DUMP_LINE = re.compile(r"^(?P<path>\S*/infiniband/[^/]+/ports/\d+/(?:(?:hw_)?counters/[^/:]+|state|phys_state|"
                        r"rate|link_layer)):(?P<value>.*)$")
_TEXT_FIELDS = ("state", "phys_state", "rate", "link_layer")


def _int(text: str | None) -> int | None:
    """A counter value as the kernel writes it (ASCII digits, at most u64), else None."""
    body = (text or "").strip()
    digits = body[1:] if body.startswith("-") else body
    return int(body) if 0 < len(digits) <= 20 and digits.isascii() and digits.isdigit() else None


def _counter_dir(folder: Path) -> dict[str, int]:
    files = sorted(folder.iterdir(), key=lambda p: p.name) if folder.is_dir() else []
    return {f.name: value for f in files if f.name != "lifespan" and (value := _int(read_attr(f))) is not None}


def snapshot(sysfs_root: Path | str, host: str, ts_ns: int | None = None) -> list[dict[str, Any]]:
    """One record per RDMA port under `sysfs_root` (a `/sys`, or its `class/infiniband` folder)."""
    root = Path(sysfs_root)
    base = next((c for c in (root / "class" / "infiniband", root / "infiniband", root)
                 if c.is_dir() and c.name == "infiniband"), root / "class" / "infiniband")
    when = time.time_ns() if ts_ns is None else ts_ns
    records: list[dict[str, Any]] = []
    if not base.is_dir():
        return records
    for dev in sorted(base.iterdir(), key=lambda p: p.name):
        ports = dev / "ports"
        if not ports.is_dir():
            continue
        pci = dev / "device"
        numa = _int(read_attr(pci / "numa_node"))
        net = pci / "net"
        netdevs = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        bus_id = pci.resolve().name if pci.exists() else ""
        known = {k: v for k, v in (("numa_node", numa), ("pci_bus_id", bus_id), ("netdevs", netdevs))
                 if v not in (None, "", [])}
        records.extend({"ts_ns": when, "host": host, "device": dev.name, "port": port.name,
                        **{name: read_attr(port / name) or "" for name in _TEXT_FIELDS},
                        "counters": _counter_dir(port / "counters"), "hw_counters": _counter_dir(port / "hw_counters"),
                        **known} for port in sorted(ports.iterdir(), key=lambda p: p.name))
    return records


def parse_rate(text: str) -> tuple[float, int]:
    """("400 Gb/sec (4X NDR)") -> (400.0, 4); (nan, -1) when unparsable."""
    m = RATE.search(text or "")
    if not m:
        return float("nan"), -1
    return float(m.group("gbps")), int(m.group("width") or -1)


def _state_id(text: str) -> int | None:
    m = _STATE.match(text or "")
    return int(m.group("id")) if m else None


def record_rows(rec: dict[str, Any], source: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(counter rows, device row) of one port record."""
    host, dev, port = str(rec.get("host", "")), str(rec["device"]), str(rec["port"])
    ts = int_in(rec["ts_ns"], 0, MAX_TS_NS)
    if ts is None:
        raise ValueError("ts_ns is not a time in nanoseconds")
    base = {"host": host, "rank": -1, "device": dev, "port": port, "ts_ns": ts}
    rows = []
    for group, prefix in (("counters", ""), ("hw_counters", ""), ("ethtool", ETHTOOL_PREFIX)):
        values = rec.get(group) or {}
        if not isinstance(values, dict):
            raise ValueError(f"{group} is not an object")
        for name, value in values.items():
            number = finite(value)
            if number is not None:
                rows.append({**base, "name": prefix + str(name), "value": number})
    gbps, width = parse_rate(str(rec.get("rate", "")))
    gauges = {"state_id": _state_id(str(rec.get("state", ""))), "phys_state_id": _state_id(str(rec.get("phys_state", ""))),
              "rate_gbps": gbps if gbps == gbps else None, "width": width if width > 0 else None}
    rows.extend({**base, "name": name, "value": float(v)} for name, v in gauges.items() if v is not None)
    numa = int_in(rec.get("numa_node"), -1, 1 << 16)
    return rows, device_row(host, "nic", dev, source, port, pci_bus_id=str(rec.get("pci_bus_id", "")),
                            numa_node=-1 if numa is None else numa, link_layer=str(rec.get("link_layer", "")),
                            netdevs=",".join(str(n) for n in rec.get("netdevs") or []))


def _rows_devices(pairs: Iterable[tuple[list[dict[str, Any]], dict[str, Any]]]
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The counter rows of (rows, device row) pairs, and the first device row of each port."""
    rows: list[dict[str, Any]] = []
    devices: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r, d in pairs:
        rows.extend(r)
        devices.setdefault((d["host"], d["device"], d["port"]), d)
    return rows, list(devices.values())


def load_rdma_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) of one `<host>.rdma.jsonl` file; bad lines become notes."""
    host = path.name.split(".")[0]
    found, bad, cut = records(path, lambda n, rec: record_rows({"host": host, **rec}, f"{path}:{n}"))
    rows, devices = _rows_devices(found)
    notes = [LoadNote("warning", str(path), f"{len(bad)} line(s) are not RDMA port samples (or hold a time or "
                      "counter out of range) and were skipped")] if bad else []
    return rows, devices, notes + cut


def _folder_time_host(root: Path) -> tuple[int | None, str]:
    parts = root.parts
    for i in range(len(parts) - 1, -1, -1):
        ts = epoch_ns(parts[i])
        if ts is not None:
            named = read_attr(root / "hostname")
            host = named or (parts[i - 1] if i > 0 else "")
            return ts, host
    return None, read_attr(root / "hostname") or ""


def _records_from(values: dict[tuple[str, str], dict[str, str]], ts: int, host: str) -> list[dict[str, Any]]:
    out = []
    for (dev, port), files in sorted(values.items()):
        rec: dict[str, Any] = {"ts_ns": ts, "host": host, "device": dev, "port": port,
                               "counters": {}, "hw_counters": {}}
        for rest, text in files.items():
            if rest in _TEXT_FIELDS:
                rec[rest] = text
            else:
                group, name = rest.split("/", 1)
                value = _int(text)
                if value is not None and name != "lifespan":
                    rec[group][name] = value
        out.append(rec)
    return out


def sysfs_copy_files(paths: Iterable[Path]) -> list[Path]:
    """The paths that are files of a copied `infiniband/<dev>/ports/<n>/` folder."""
    return [p for p in paths if _PORT_PATH.match(p.as_posix())]


def load_sysfs_copies(paths: Sequence[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) from copied sysfs port folders (docs/internals/collectors.md)."""
    groups: dict[str, dict[tuple[str, str], dict[str, str]]] = {}
    for p in paths:
        m = _PORT_PATH.match(p.as_posix())
        if not m:
            continue
        text = read_attr(p)
        if text is not None:
            groups.setdefault(m.group("root"), {}).setdefault((m.group("dev"), m.group("port")), {})[
                m.group("rest")] = text
    pairs: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
    notes: list[LoadNote] = []
    for root, values in sorted(groups.items()):
        ts, host = _folder_time_host(Path(root))
        if ts is None:
            notes.append(LoadNote("warning", root, "sysfs counter copy without a time in its folder names "
                                  "(<host>/<epoch>/infiniband/...): skipped, rates need sample times"))
            continue
        pairs.extend(record_rows(rec, root) for rec in _records_from(values, ts, host))
    return (*_rows_devices(pairs), notes)


def looks_like_sysfs_dump(head: str) -> bool:
    """True when a text starts like `grep -H .` output over infiniband port counter files."""
    return any(_DUMP_LINE.match(line) for line in head.splitlines()[:50])


def load_sysfs_dump(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(counter rows, device rows, notes) of a text dump of repeated `grep -H .` snapshots."""
    host = path.name.split(".")[0]
    ts: int | None = None
    current: dict[tuple[str, str], dict[str, str]] = {}
    snapshots: list[dict[str, Any]] = []
    notes: list[LoadNote] = []

    def flush() -> None:
        if current and ts is not None:
            snapshots.extend(_records_from(current, ts, host))
        current.clear()

    blocks = LineBlocks(path)
    for _, line in iter_lines(blocks):
        line = line.strip()
        if (named := named_host(line)) is not None:
            host = named
            continue
        if (at := stamp(line)) is not None:
            flush()
            ts = at
            continue
        m = _DUMP_LINE.match(line)
        if m:
            pm = _PORT_PATH.match(m.group("path"))
            if pm:
                current.setdefault((pm.group("dev"), pm.group("port")), {})[pm.group("rest")] = m.group("value")
    flush()
    if not snapshots:
        notes.append(LoadNote("warning", str(path), "sysfs counter dump without time lines (`date +%s.%N` or "
                              "`# ts_ns=N` before each snapshot): skipped, rates need sample times"))
    notes.extend(LoadNote("warning", str(path), n) for n in blocks.stats.notes(blocks.cap))
    return (*_rows_devices(record_rows(rec, str(path)) for rec in snapshots), notes)
