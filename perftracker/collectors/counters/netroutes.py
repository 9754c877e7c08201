"""Which network interfaces a job uses on this node: its socket settings, and the routes to its peers.

Promise: `parse_routes` / `parse_routes6` read the kernel's route tables, `route_iface` picks a route,
`ifname_matches` applies a socket-interface setting as its library does, `job_interfaces` says why each interface
is the job's; `peer_addresses`, `settings_of` and `iface_addresses` read live processes and never raise.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from perftracker.formats.nccl_lists import match_list, parse_list

IFNAME_SETTINGS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
PEER_SETTINGS = ("MASTER_ADDR",)
_PREFIX_MATCH = {"NCCL_SOCKET_IFNAME"}
MAX_REASON_PEERS = 3


@dataclass(frozen=True)
class Route:
    iface: str
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    metric: int


def _le_ipv4(hex_text: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int.from_bytes(bytes.fromhex(hex_text), "little"))


def _routes(lines: list[str], fields: int, route_of: Callable[[list[str]], Route]) -> list[Route]:
    """`route_of(fields of the line)` of each line with at least `fields` fields; lines it refuses are skipped."""
    routes = []
    for parts in (line.split() for line in lines):
        try:
            if len(parts) >= fields:
                routes.append(route_of(parts))
        except ValueError:
            continue
    return routes


def parse_routes(text: str) -> list[Route]:
    """Routes of `/proc/net/route` (device, little-endian hex destination, ..., metric, mask); bad lines skipped."""
    return _routes(text.splitlines()[1:], 8, lambda p: Route(
        p[0], ipaddress.IPv4Network(f"{_le_ipv4(p[1])}/{_le_ipv4(p[7])}", strict=False), int(p[6])))


def parse_routes6(text: str) -> list[Route]:
    """Routes of `/proc/net/ipv6_route` (destination, prefix length in hex, ..., metric, ..., device)."""
    return _routes(text.splitlines(), 10, lambda p: Route(
        p[9], ipaddress.IPv6Network(f"{ipaddress.IPv6Address(int(p[0], 16))}/{int(p[1], 16)}", strict=False),
        int(p[5], 16)))


def read_routes(proc_root: Path = Path("/proc")) -> list[Route]:
    """This node's IPv4 and IPv6 routes ([] when /proc cannot be read)."""
    routes: list[Route] = []
    for name, parse in (("route", parse_routes), ("ipv6_route", parse_routes6)):
        try:
            routes.extend(parse((proc_root / "net" / name).read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return routes


def route_iface(address: str, routes: Sequence[Route]) -> str | None:
    """The interface traffic to `address` leaves by: the longest matching prefix, lowest metric first."""
    try:
        addr = ipaddress.ip_address(normal_address(address))
    except ValueError:
        return None
    matches = [r for r in routes if r.network.version == addr.version and addr in r.network]
    if not matches:
        return None
    best = max(matches, key=lambda r: (r.network.prefixlen, -r.metric))
    return best.iface


def ifname_matches(variable: str, value: str, name: str) -> bool:
    """Whether `name` is selected by `variable=value` (docs/internals/collectors.md)."""
    text = value.strip()
    if variable not in _PREFIX_MATCH:
        return name in {t.strip() for t in text.split(",") if t.strip()}
    return bool(match_list(parse_list(text), [name]))  # NCCL's list syntax: formats/nccl_lists.py


def normal_address(address: str) -> str:
    """`address` without a zone index, an IPv4-mapped IPv6 address as plain IPv4 (`::ffff:10.0.0.1` -> `10.0.0.1`)."""
    text = address.split("%")[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def job_interfaces(settings: Mapping[str, str], peers: Iterable[str], names: Sequence[str],
                   routes: Sequence[Route], local: Iterable[str] = ()) -> dict[str, str]:
    """{iface: why} of the interfaces the job uses on this node (docs/internals/collectors.md)."""
    reasons: dict[str, list[str]] = {}
    candidates = [n for n in names if n != "lo"]
    for variable in IFNAME_SETTINGS:
        value = settings.get(variable, "")
        if not value:
            continue
        for name in candidates:
            if ifname_matches(variable, value, name):
                reasons.setdefault(name, []).append(f"{variable}={value}")
    by_iface = {i: a for i, a in peers_by_iface(peers, routes, local).items() if i in candidates}
    for iface, addrs in by_iface.items():
        shown = ", ".join(addrs[:MAX_REASON_PEERS]) + (f" and {len(addrs) - MAX_REASON_PEERS} more"
                                                       if len(addrs) > MAX_REASON_PEERS else "")
        reasons.setdefault(iface, []).append(f"route to {shown}")
    return {name: "; ".join(why) for name, why in sorted(reasons.items())}


def peers_by_iface(peers: Iterable[str], routes: Sequence[Route], local: Iterable[str] = ()) -> dict[str, list[str]]:
    """{iface: [peer addresses it reaches]} for the peers that are not this node's own addresses."""
    own = set(local)
    out: dict[str, list[str]] = {}
    for peer in sorted(set(peers)):
        if peer in own or _is_loopback(peer):
            continue
        iface = route_iface(peer, routes)
        if iface and iface != "lo":
            out.setdefault(iface, []).append(peer)
    return out


def peer_addresses(pids: Iterable[int]) -> set[str]:
    """Remote addresses of the established TCP connections of `pids` (loopback left out)."""
    found: set[str] = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except (psutil.Error, OSError):
            continue
        for conn in conns:
            if conn.status == psutil.CONN_ESTABLISHED and conn.raddr and not _is_loopback(conn.raddr.ip):
                found.add(normal_address(conn.raddr.ip))
    return found


def settings_of(pids: Iterable[int]) -> dict[str, str]:
    """The socket-interface settings and MASTER_ADDR in the environments of `pids` (first one seen wins)."""
    out: dict[str, str] = {}
    for pid in pids:
        try:
            env = psutil.Process(pid).environ()
        except (psutil.Error, OSError):
            continue
        for key in (*IFNAME_SETTINGS, *PEER_SETTINGS):
            if env.get(key) and key not in out:
                out[key] = env[key]
    return out


def iface_addresses() -> dict[str, list[str]]:
    """{iface: its IPv4 / IPv6 addresses} of this node (this network namespace)."""
    found: dict[str, list[str]] = {}
    try:
        for name, addrs in psutil.net_if_addrs().items():
            ips = sorted({normal_address(a.address) for a in addrs if a.family.name in ("AF_INET", "AF_INET6")})
            if ips:
                found[name] = ips
    except OSError:
        pass
    return found


def local_addresses() -> set[str]:
    """The addresses of this node's (this network namespace's) interfaces."""
    return {a for addrs in iface_addresses().values() for a in addrs}
