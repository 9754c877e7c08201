"""The lines every text dump of counters shares: a time line before each snapshot, a `# host=` line.

Promise: `stamp(line)` is the time (ns) a `# ts_ns=<ns>` or bare epoch line (`date +%s.%N`: s, ms, us or ns,
told apart by size) gives, None for any other line; `named_host(line)` the host a `# host=<name>` line names.
`MAX_TS_NS` bounds every sample time of the counter readers; `device_row` / `iface_row` build the `devices` /
`net_ifaces` rows every reader makes.
"""

from __future__ import annotations

import math
from typing import Any

MAX_TS_NS = 4 * 10**18


def epoch_ns(text: str) -> int | None:
    """An epoch time in s, ms, us or ns (told apart by size) as ns; None for anything else."""
    try:
        value = float(text[:64])
    except ValueError:
        return None
    if not math.isfinite(value) or value >= MAX_TS_NS:
        return None
    for limit, scale in ((1e17, 1.0), (1e14, 1e3), (1e11, 1e6), (1e8, 1e9)):
        if value > limit:
            return int(value * scale)
    return None


def stamp(line: str) -> int | None:
    return epoch_ns(line[8:] if line.startswith("# ts_ns=") else line)


def named_host(line: str) -> str | None:
    return line[7:].strip() if line.startswith("# host=") else None


def device_row(host: str, kind: str, device: str, source: str, port: str = "", uuid: str = "", pci_bus_id: str = "",
               numa_node: int = -1, link_layer: str = "", netdevs: str = "") -> dict[str, Any]:
    """A `devices` row (kind "gpu" or "nic"); the ranks on a device are filled in by the reader that knows them."""
    return {"host": host, "kind": kind, "device": device, "port": port, "uuid": uuid, "pci_bus_id": pci_bus_id,
            "numa_node": numa_node, "link_layer": link_layer, "netdevs": netdevs, "ranks": "", "source": source}


def iface_row(host: str, iface: str, source: str, why: str = "", peers: str = "", addresses: str = "",
              qdisc: str = "") -> dict[str, Any]:
    """A `net_ifaces` row: why the job uses the interface, its peers and addresses (comma-separated), its qdisc."""
    return {"host": host, "iface": iface, "why": why, "peers": peers, "addresses": addresses, "qdisc": qdisc,
            "source": source}
