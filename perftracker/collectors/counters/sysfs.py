"""What a node's sysfs says about its RDMA devices and network interfaces.

Promise: `read_sysfs(root)` reads `<root>/class/infiniband/*` and `<root>/class/net/*` as the kernel lays them
out (unreadable files skipped, never fatal) into plain JSON-able data for `RunInfo.sysfs`, with a `status`
saying what it could not read and why. Details: docs/internals/collectors.md.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Any

from perftracker.bounded import read_text
from perftracker.errors import InputError

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def read_attr(path: Path) -> str | None:
    """A sysfs attribute's text, stripped; None when it cannot be read (never a FIFO or device)."""
    try:
        text, _ = read_text(path, 1 << 16)  # an attribute is a page at most; a FIFO or device is never read
    except (InputError, OSError):
        return None
    return text.strip()


def _index(name: str) -> int | None:
    """A sysfs entry's number (`gids/3`, `ports/1`), ASCII digits only."""
    return int(name) if name.isascii() and name.isdigit() and len(name) <= 9 else None


def _gid_ip(gid: str) -> str | None:
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    return str(addr.ipv4_mapped or addr)


def _port(port_dir: Path) -> dict[str, Any]:
    gids: list[dict[str, Any]] = []
    gid_dir = port_dir / "gids"
    names = sorted((p.name for p in gid_dir.iterdir()), key=lambda n: (_index(n) is None, _index(n) or 0)) \
        if gid_dir.is_dir() else []
    table_len = 0
    for name in names:
        index = _index(name)
        if index is None:
            continue
        table_len = max(table_len, index + 1)
        gid = read_attr(gid_dir / name)
        if not gid or gid == ZERO_GID:
            continue
        gids.append({
            "index": index, "gid": gid, "ip": _gid_ip(gid),
            "type": read_attr(port_dir / "gid_attrs" / "types" / name),
            "ndev": read_attr(port_dir / "gid_attrs" / "ndevs" / name),
        })
    state = read_attr(port_dir / "state") or ""
    return {
        "port": _index(port_dir.name) if _index(port_dir.name) is not None else -1,
        "state": state, "active": state.endswith("ACTIVE"),
        "link_layer": read_attr(port_dir / "link_layer") or "",
        "rate": read_attr(port_dir / "rate") or "",
        "gid_table_len": table_len, "gids": gids,
    }


def read_rdma(root: Path) -> list[dict[str, Any]]:
    """RDMA devices under `<root>/class/infiniband`, sorted by name."""
    base = root / "class" / "infiniband"
    devices: list[dict[str, Any]] = []
    if not base.is_dir():
        return devices
    for dev in sorted(base.iterdir(), key=lambda p: p.name):
        ports_dir = dev / "ports"
        ports = [_port(p) for p in sorted(ports_dir.iterdir(), key=lambda p: p.name)] if ports_dir.is_dir() else []
        net_dir = dev / "device" / "net"
        netdevs = sorted(p.name for p in net_dir.iterdir()) if net_dir.is_dir() else []
        devices.append({"device": dev.name, "ports": ports, "netdevs": netdevs,
                        "node_type": read_attr(dev / "node_type") or ""})
    return devices


def read_net(root: Path, rdma: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Interfaces under `<root>/class/net` with operstate, known addresses and whether each is a bridge."""
    base = root / "class" / "net"
    addresses: dict[str, set[str]] = {}
    for dev in rdma or []:
        for port in dev["ports"]:
            for gid in port["gids"]:
                if gid.get("ndev") and gid.get("ip"):
                    addresses.setdefault(gid["ndev"], set()).add(gid["ip"])
    if root.resolve() == Path("/sys"):
        for name, addrs in _kernel_addresses().items():
            addresses.setdefault(name, set()).update(addrs)
    ifaces = sorted(base.iterdir(), key=lambda p: p.name) if base.is_dir() else []
    return [{"name": iface.name, "operstate": read_attr(iface / "operstate") or "",
             "type": read_attr(iface / "type") or "", "addresses": sorted(addresses.get(iface.name, ())),
             "bridge": is_bridge(root, iface.name)} for iface in ifaces]


def _kernel_addresses() -> dict[str, set[str]]:
    """Addresses of the real machine: IPv6 from /proc/net/if_inet6, IPv4 with SIOCGIFADDR."""
    found: dict[str, set[str]] = {}
    text = read_attr(Path("/proc/net/if_inet6")) or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 6:
            raw = parts[0]
            addr = ":".join(raw[i:i + 4] for i in range(0, 32, 4))
            found.setdefault(parts[5], set()).add(str(ipaddress.IPv6Address(addr)))
    try:
        import fcntl
        import struct

        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                try:
                    packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                except OSError:
                    continue
                found.setdefault(name, set()).add(socket.inet_ntoa(packed[20:24]))
    except (ImportError, OSError):
        pass
    return found


def class_status(root: Path, name: str) -> str:
    """Whether `<root>/class/<name>` could be read: ok, no_sysfs (no `<root>/class`), missing (no such
    class: for infiniband, no RDMA driver loaded), empty (no devices), or permission (not readable)."""
    base = root / "class"
    if not base.is_dir():
        return "no_sysfs"
    folder = base / name
    if not folder.is_dir():
        return "missing"
    if not os.access(folder, os.R_OK | os.X_OK):
        return "permission"
    try:
        return "ok" if any(folder.iterdir()) else "empty"
    except PermissionError:
        return "permission"
    except OSError:
        return "missing"


def is_bridge(root: Path, name: str) -> bool:
    """A network interface that is a bridge (docker0, virbr0, br-..., cni0): the kernel gives it a
    `bridge/` folder. (Not "under devices/virtual": a container's own eth0 is a veth and lives there.)"""
    return (root / "class" / "net" / name / "bridge").is_dir()


def read_sysfs(root: Path | str = "/sys", host: str = "") -> dict[str, Any]:
    """RDMA devices and network interfaces of one node, named `host` (as the command computed it; ""
    when unnamed), as `RunInfo.sysfs` holds them, with what could be read: `status` maps `rdma` and
    `net` to `class_status` (ok, no_sysfs, missing, empty, permission)."""
    root_path = Path(root)
    if not (root_path / "class").is_dir() and root_path.name == "class":
        root_path = root_path.parent
    rdma = read_rdma(root_path)
    net = read_net(root_path, rdma)
    return {
        "root": str(root_path),
        "host": host,
        "available": (root_path / "class").is_dir() and os.access(root_path / "class", os.R_OK),
        "status": {"rdma": class_status(root_path, "infiniband"), "net": class_status(root_path, "net")},
        "rdma": rdma,
        "net": net,
    }
