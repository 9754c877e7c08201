"""Ethernet interface and TCP counters of one node: a live snapshot, its run-directory record, its rows.

Promise: `snapshot(...)` reads the named interfaces' sysfs state and counters, their root qdisc and the node's
TCP counters into one record (unreadable files left out, never fatal); `record_rows(record)` turns a record
into `netdev` and `net_ifaces` rows; `load_net_jsonl(path)` reads a file of records.
Record format and row names: docs/internals/collectors.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from perftracker.collectors.counters.dump_lines import iface_row
from perftracker.collectors.counters.sysfs import read_attr
from perftracker.collectors.file_notes import records
from perftracker.store import LoadNote
from perftracker.values import NET_STATE_CHANGE

TCP_PREFIX = "tcp:"
STATE_CHANGE = NET_STATE_CHANGE
QDISC_PREFIX = "qdisc_"
IFF_UP = 0x1
TCP_NAMES = ("InSegs", "OutSegs", "RetransSegs", "InErrs", "OutRsts", "EstabResets", "AttemptFails",
             "TCPTimeouts", "TCPLostRetransmit", "TCPSynRetrans", "TCPFastRetrans", "TCPSlowStartRetrans",
             "TCPLossProbes", "TCPAbortOnTimeout", "TCPAbortOnData", "TCPAbortOnClose")
_IFACE_FILES = ("carrier_changes", "carrier_up_count", "carrier_down_count")
_OPER_UP = {"up": 1.0, "down": 0.0, "lowerlayerdown": 0.0, "notpresent": 0.0, "dormant": 0.0}
_QDISC_COUNTERS = ("bytes", "packets", "drops", "overlimits", "requeues")
TC_TIMEOUT_S = 2.0

QdiscReader = Callable[[str], dict[str, Any] | None]


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0) if text.startswith("0x") else int(text)
    except ValueError:
        return None


def _link_state(base: Path) -> dict[str, Any]:
    """operstate (None unreadable), carrier (0 unreadable: EINVAL while admin down), admin_up (None unreadable)."""
    flags, carrier = _int(read_attr(base / "flags")), _int(read_attr(base / "carrier"))
    return {"operstate": read_attr(base / "operstate"), "carrier": carrier if carrier is not None else 0,
            "admin_up": bool(flags & IFF_UP) if flags is not None else None}


def read_iface(sysfs_root: Path, name: str) -> dict[str, Any] | None:
    """The state and counters of `<sysfs_root>/class/net/<name>`; None when there is no such interface."""
    base = sysfs_root / "class" / "net" / name
    if not base.is_dir():
        return None
    out = {key: value for key, value in _link_state(base).items() if value not in (None, "")}
    speed = _int(read_attr(base / "speed"))
    out["speed_mbps"] = speed if speed is not None and speed > 0 else -1
    mtu = _int(read_attr(base / "mtu"))
    if mtu is not None:
        out["mtu"] = mtu
    stats = base / "statistics"
    files = [base / f for f in _IFACE_FILES] + (sorted(stats.iterdir(), key=lambda p: p.name) if stats.is_dir() else [])
    out["counters"] = {f.name: value for f in files if (value := _int(read_attr(f))) is not None}
    return out


def read_state(sysfs_root: Path, name: str) -> dict[str, Any] | None:
    """Only the link state of `<sysfs_root>/class/net/<name>` (operstate, carrier, admin_up): three small reads,
    cheap enough to watch every tenth of a second; None when there is no such interface."""
    state = _link_state(sysfs_root / "class" / "net" / name)
    return state if state["operstate"] is not None else None


def state_record(host: str, states: Mapping[str, Mapping[str, Any]], watch_s: float,
                 ts_ns: int | None = None) -> dict[str, Any]:
    """The record of link states that changed, seen by a watcher polling every `watch_s` seconds."""
    return {"ts_ns": time.time_ns() if ts_ns is None else ts_ns, "host": host, "changed_within_s": watch_s,
            "ifaces": {name: dict(state) for name, state in states.items()}}


def interface_names(sysfs_root: Path) -> list[str]:
    """Every interface under `<sysfs_root>/class/net`, sorted."""
    base = sysfs_root / "class" / "net"
    try:
        return sorted(p.name for p in base.iterdir())
    except OSError:
        return []


def parse_tc_json(text: str) -> dict[str, Any] | None:
    """The root qdisc of `tc -s -j qdisc show dev <iface>` output: kind, counters, backlog, shaper rate."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, list):
        return None
    roots = [q for q in data if isinstance(q, dict) and q.get("root")]
    if not roots:
        return None
    q = roots[0]
    out: dict[str, Any] = {"kind": str(q.get("kind", ""))}
    for name in _QDISC_COUNTERS:
        if isinstance(q.get(name), int):
            out[name] = int(q[name])
    if isinstance(q.get("backlog"), int):
        out["backlog_bytes"] = int(q["backlog"])
    options = q.get("options") if isinstance(q.get("options"), dict) else {}
    rate = options.get("rate") if options else None
    if isinstance(rate, (int, float)) and rate > 0:
        out["rate_bps"] = int(rate) * 8  # tc's JSON gives shaper rates in bytes per second
    return out


def read_qdisc(iface: str) -> dict[str, Any] | None:
    """`tc -s -j qdisc show dev <iface>` of this node's root qdisc; None without tc or on any failure."""
    tc = shutil.which("tc")
    if tc is None:
        return None
    try:
        proc = subprocess.run([tc, "-s", "-j", "qdisc", "show", "dev", iface], capture_output=True,
                              text=True, timeout=TC_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_tc_json(proc.stdout) if proc.returncode == 0 else None


def _table(text: str, prefix: str) -> dict[str, int]:
    """`{name: value}` of the two-line `<prefix>: names` / `<prefix>: values` blocks of /proc/net/snmp."""
    lines = [line.split() for line in text.splitlines() if line.startswith(prefix + ":")]
    out: dict[str, int] = {}
    for names, values in zip(lines[::2], lines[1::2]):
        for name, value in zip(names[1:], values[1:]):
            number = _int(value)
            if number is not None:
                out[name] = number
    return out


def snapshot(host: str, ifaces: Mapping[str, str], sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
             qdisc_reader: QdiscReader | None = read_qdisc, ts_ns: int | None = None,
             peers: Mapping[str, Iterable[str]] | None = None,
             addresses: Mapping[str, Iterable[str]] | None = None) -> dict[str, Any]:
    """One sample of the interfaces `ifaces` (name -> why the job uses it) and the node's TCP counters."""
    record: dict[str, Any] = {"ts_ns": time.time_ns() if ts_ns is None else ts_ns, "host": host, "ifaces": {}}
    for name, why in ifaces.items():
        iface = read_iface(sysfs_root, name)
        if iface is None:
            continue
        extra = {"qdisc": qdisc_reader(name) if qdisc_reader is not None else None, "why": why,
                 "peers": sorted(set((peers or {}).get(name, ()))),
                 "addresses": sorted(set((addresses or {}).get(name, ())))}
        record["ifaces"][name] = {**iface, **{key: value for key, value in extra.items() if value}}
    both = {**_table(read_attr(proc_root / "net" / "snmp") or "", "Tcp"),  # the node's TCP counters of TCP_NAMES
            **_table(read_attr(proc_root / "net" / "netstat") or "", "TcpExt")}
    if tcp := {name: both[name] for name in TCP_NAMES if name in both}:
        record["tcp"] = tcp
    return record


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None  # a bool too: True is 1.0


def iface_rows(host: str, iface: str, data: Mapping[str, Any], ts: int) -> list[dict[str, Any]]:
    """`netdev` rows of one interface's sample (names: docs/internals/collectors.md)."""
    base = {"host": host, "iface": iface, "ts_ns": ts}
    rows: list[dict[str, Any]] = []

    def add(name: str, value: Any) -> None:
        number = _num(value)
        if number is not None:
            rows.append({**base, "name": name, "value": number})

    oper = str(data.get("operstate", "")).lower()
    if oper in _OPER_UP:
        add("operstate_up", _OPER_UP[oper])
    for gauge in ("carrier", "admin_up", "mtu"):
        add(gauge, data.get(gauge))
    speed = _num(data.get("speed_mbps"))
    if speed is not None and speed > 0:
        add("speed_mbps", speed)
    for name, value in (data.get("counters") or {}).items():
        add(str(name), value)
    qdisc = data.get("qdisc") or {}
    if isinstance(qdisc, Mapping):
        for name, value in qdisc.items():
            if name != "kind":
                add(QDISC_PREFIX + str(name), value)
    return rows


def record_rows(rec: Mapping[str, Any], source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(netdev rows, net_ifaces rows) of one sample record."""
    host, ts = str(rec.get("host", "")), int(rec["ts_ns"])
    rows: list[dict[str, Any]] = []
    ifaces: list[dict[str, Any]] = []
    changed = _num(rec.get("changed_within_s"))
    for name, data in (rec.get("ifaces") or {}).items():
        if not isinstance(data, Mapping):
            continue
        rows.extend(iface_rows(host, str(name), data, ts))
        if changed is not None:  # a watcher's record: the state changed at most this long before ts
            rows.append({"host": host, "iface": str(name), "name": STATE_CHANGE, "ts_ns": ts, "value": changed})
        qdisc = data.get("qdisc") if isinstance(data.get("qdisc"), Mapping) else {}
        ifaces.append(iface_row(host, str(name), source, str(data.get("why", "")),
                                ",".join(str(p) for p in data.get("peers") or []),
                                ",".join(str(a) for a in data.get("addresses") or []), str((qdisc or {}).get("kind", ""))))
    rows.extend({"host": host, "iface": "", "name": TCP_PREFIX + str(name), "ts_ns": ts, "value": number}
                for name, value in (rec.get("tcp") or {}).items() if (number := _num(value)) is not None)
    return rows, ifaces


def looks_like_net_jsonl(first: Mapping[str, Any]) -> bool:
    """True for the first record of a `<host>.net.jsonl` file."""
    return "ts_ns" in first and isinstance(first.get("ifaces"), dict)


def load_net_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    """(netdev rows, net_ifaces rows, notes) of one `<host>.net.jsonl` file; bad lines become one note."""
    host = path.name.split(".")[0]
    found, bad, _ = records(path, lambda n, rec: record_rows({"host": host, **rec}, f"{path}:{n}"))
    notes = [LoadNote("warning", str(path), f"{len(bad)} line(s) are not interface samples and were skipped (a "
                      "line cut off by a crash is expected at the end)")] if bad else []
    return [row for rows, _ in found for row in rows], [i for _, ifaces in found for i in ifaces], notes
