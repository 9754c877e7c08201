"""Regular expressions and small pure helpers for NCCL_DEBUG log lines (NCCL 2.3 to 2.30).

Promise: every pattern runs in time linear in the line, however long and however crafted, and is applied only
after a cheap keyword check; nothing here does I/O. How the patterns stay linear: docs/internals/collectors.md.
"""

from __future__ import annotations

import json
import re

# Header before " NCCL INFO|WARN|TRACE": host:pid:tid [dev], then for WARN an optional source
# location `file:line` and an optional `(func)`; TRACE adds `<ms> func:line`.
HEADER = re.compile(
    r"(?<![^\s:])(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]"
    r"(?: [\d.]+)?(?: (?P<src>[^\s:]+):(?P<srcline>\d+))?(?: \([^()]{0,256}\))?\s*$"
)
# Launcher prefixes that name the rank: mpirun `[1,3]<stdout>:`, `[Rank 3] `, torchrun `[3] `/`[3]:`.
RANK_PREFIX = re.compile(r"^\s*\[(?:\d+,(?P<mpi>\d+)\]<std\w+>|Rank (?P<rk>\d+)\]|(?P<num>\d+)\]:?\s)")

VERSION = re.compile(r"NCCL version (?P<ver>\d+\.\d+\.\d+)(?P<suffix>[^\s+,]*)(?:\+cuda(?P<cuda>[\w.]+))?")

# NET/IB device list tokens (2.4+ single line; 2.3 one line per device; 2.27 detail lines).
IB_DEVICE = re.compile(
    r"\[(?P<idx>\d+)\]\s?(?P<hca>[\w.+-]+?)(?::uverbs\d+)?:(?P<port>\d+)/(?P<ll>IB|RoCE)(?P<sharp>/SHARP)?"
)
OOB = re.compile(r";\s*OOB (?P<iface>[^:\s]{0,64}):(?P<addr>[^<]{0,128}?)<\d+>")
# Interface lists: `[0]eth0:10.0.0.1<0>`, `eth0:10.0.0.1<0>`, `enp1s0f0:fe80::1%enp1s0f0<0>`, `lo:<0>`.
IFACE = re.compile(r"(?:\[\d+\])?(?<![^\s\]])(?P<iface>[^\s:\[\]]+):(?P<addr>[^\s<]{0,128})<\d+>")

CHANNEL_SUMMARY = re.compile(r"^(?P<coll>\d+) coll channels,(?: (?P<collnet>\d+) collnet channels,)?"
                             r"(?: (?P<nvls>\d+) nvls channels,)? (?P<p2p>\d+) p2p channels")
COMM_INIT = re.compile(
    r"(?:(?<!\w)(?P<fn>nccl\w+) )?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
    r"cudaDev (?P<cuda>\d+)(?: nvmlDev (?P<nvml>\d+))?(?: busId (?P<bus>[0-9a-f]+))?"
    r"(?: parent 0x[0-9a-f]+ [^-]{0,256}?)?(?: commId (?P<commid>0x[0-9a-f]+))? ?- Init (?P<state>START|COMPLETE)"
)
COMM_NODES = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
    r"localRanks (?P<local>\d+) localRank (?P<localrank>\d+)"
)
INIT_TIMINGS = re.compile(
    r"Init timings(?::| - (?P<fn>\w+):) rank (?P<rank>\d+) nranks (?P<nranks>\d+) total (?P<total>[\d.]+)"
    r"(?: \((?P<parts>[^)]{0,1024})\))?"
)
# The value is the rest of the line; `env_echo_value` strips the trailing '.' and blanks.
ENV_ECHO = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]+) set (?:by environment )?to ?(?P<val>.*)$")
ERROR_CHAIN = re.compile(r"^(?P<src>[\w./-]+\.(?:cc|c|h|cpp)):(?P<line>\d+) -> (?P<code>\d+)(?: \[(?P<thread>[^\]]+)\])?")
COMPLETION = re.compile(
    r"Got completion from peer (?P<peer>[^\s<]*)(?:<(?P<port>\d+)>)? with "
    r"(?:error |status=)(?P<status>\w{1,64}?(?:\((?P<num>\d{1,9})\))?)[,\s]"
    r"(?:.{0,512}?opcode[ =](?P<opcode>[\w()]{1,64}))?"
    r"(?:.{0,512}?vendor[ _]err[ =]?\s?(?P<vendor>\d{1,9}))?"
    r"(?:.{0,512}?\((?P<dir>Send|Recv|[A-Za-z]{1,32})\))?"
    r"(?:.{0,512}?localGid (?P<lgid>\S{1,64}))?(?:.{0,512}?remoteGids?(?P<rgid>\S{1,64}))?"
)
QP_INFO = re.compile(
    r"NET/IB: (?:NCCL )?Dev (?P<dev>\d+)(?: IbDev (?P<ibdev>\d+))? Port (?P<port>\d+) qpn (?P<qpn>\d+) "
    r"mtu (?P<mtu>\d+)(?P<rest>.*)$"
)
QP_GID = re.compile(r"GID (?P<idx>\d+) \((?P<prefix>[0-9A-Fa-f]+)/(?P<iid>[0-9A-Fa-f]+)\)")
QP_LID = re.compile(r"\bLID (?P<lid>\d+)")
GDR_DISABLED = re.compile(r"GPU Direct RDMA Disabled for (?P<what>.*)$")
CONNECTED_RINGS = re.compile(r"Connected all rings(?:, use ring PXN (?P<pxn>\d) GDR (?P<gdr>\d))?")
# The name is the rest of the line; `plugin_name` strips a trailing ` (vN)` and blanks.
PLUGIN_LOADED = re.compile(r"Loaded (?:net|coll) plugin (?P<name>.+)$")
_PLUGIN_VERSION = re.compile(r" \(v\d+\)$")
RING_LISTING = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :")


def env_echo_value(raw: str) -> str:
    """The value of an `NCCL_X set by environment to V.` line's rest: without the final '.' and blanks."""
    value = raw.rstrip()
    return value[:-1] if value.endswith(".") else value


def plugin_name(raw: str) -> str:
    """A `Loaded net plugin NAME (v8)` line's plugin name."""
    return _PLUGIN_VERSION.sub("", raw.rstrip()).rstrip()


def gid_prefix_is_link_local(prefix_hex: str) -> bool:
    """The QP line prints the 64-bit subnet prefix as a little-endian number: `80FE` is fe80::/64."""
    try:
        value = int(prefix_hex, 16)
    except ValueError:
        return False
    return value.to_bytes(8, "little")[:2] == b"\xfe\x80" or prefix_hex.lower().startswith("fe80")


def fact_json(**fields: object) -> str:
    """A process fact's value: compact JSON with sorted keys, fields that are None or "" left out."""
    return json.dumps({k: v for k, v in fields.items() if v is not None and v != ""}, sort_keys=True,
                      separators=(",", ":"))
