"""The topology and graph lines of an NCCL_DEBUG=INFO log (NCCL_DEBUG_SUBSYS with GRAPH) as process facts.

Promise: each handler takes one message (the text after `NCCL INFO `), records what it shows in the process's
facts and returns None, or "" when the message is not one of its lines; none raises. Values are compact JSON
(bandwidths in GB/s as NCCL models them). The lines and the facts they give: docs/internals/collectors.md.
"""

from __future__ import annotations

import json
import re
from typing import Protocol


class ProcFacts(Protocol):
    """What a handler needs of a process's facts (lines.ProcFacts)."""

    def add(self, key: str, value: str, line: int) -> None: ...

SYSTEM = re.compile(r"^=== System : max(?:Bw|Width) (?P<max>[\d.]+) total(?:Bw|Width) (?P<total>[\d.]+)")
LINK = re.compile(r"^\+ (?P<type>[A-Z0-9]{2,4})\[(?P<bw>[\d.]{1,16})\] - (?P<to>[A-Z]{2,4}/[0-9A-Fa-f-]{1,40})")
PATH_HEAD = re.compile(r"^(?P<src>(?:GPU|NET)/[0-9A-Fa-f-]{1,40}) :")
PATH_ITEM = re.compile(r"(?P<dst>(?:GPU|NET|CPU|NVS)/[0-9A-Fa-f-]{1,40}) \((?P<hops>\d{1,4})/(?P<bw>[\d.]{1,16})/"
                       r"(?P<type>[A-Z]{2,4})\)")
PATTERN = re.compile(
    r"^Pattern (?P<pattern>\d+), crossNic (?P<cross>\d+), nChannels (?P<n>\d+), (?:bw|speed) "
    r"(?P<intra>[\d.]+)/(?P<inter>[\d.]+), type (?P<ti>[A-Z]+)/(?P<te>[A-Z]+), sameChannels (?P<same>\d+)")
_MAX_PATHS = 64  # a node's path line names every node of the system: keep the GPUs and NICs, bounded


def _js(**fields: object) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def system(msg: str, proc: ProcFacts, line: int) -> str | None:
    m = SYSTEM.match(msg)
    if m is None:
        return ""
    proc.add("topo_system", _js(max_bw=float(m.group("max")), total_bw=float(m.group("total"))), line)
    return None


def tree_link(msg: str, proc: ProcFacts, line: int) -> str | None:
    """`+ TYPE[bw] - NODE` of the system tree (the message is indented by its depth)."""
    m = LINK.match(msg.lstrip())
    if m is None:
        return ""
    proc.add("topo_link", _js(type=m.group("type"), bw=float(m.group("bw")), to=m.group("to")), line)
    return None


def paths(msg: str, proc: ProcFacts, line: int) -> str | None:
    """One node's paths to the others: the GPU and NET ones are kept (the CPU and switch ones are the route)."""
    head = PATH_HEAD.match(msg)
    if head is None:
        return ""
    src = head.group("src")
    for i, m in enumerate(PATH_ITEM.finditer(msg, head.end())):
        if i >= _MAX_PATHS:
            break
        dst = m.group("dst")
        if dst == src or not dst.startswith(("GPU/", "NET/")):
            continue
        proc.add("topo_path", _js(src=src, dst=dst, hops=int(m.group("hops")), bw=float(m.group("bw")),
                                  type=m.group("type")), line)
    return None


def pattern(msg: str, proc: ProcFacts, line: int) -> str | None:
    m = PATTERN.match(msg)
    if m is None:
        return ""
    proc.add("graph_pattern", _js(pattern=int(m.group("pattern")), cross_nic=int(m.group("cross")),
                                  nchannels=int(m.group("n")), bw_intra=float(m.group("intra")),
                                  bw_inter=float(m.group("inter")), type_intra=m.group("ti"),
                                  type_inter=m.group("te"), same_channels=int(m.group("same"))), line)
    return None


def nvls(msg: str, proc: ProcFacts, line: int) -> str | None:
    if msg.startswith("NVLS multicast support is"):
        proc.add("nvls", "unavailable" if " not " in msg else "available", line)
        return None
    if msg.startswith("NVLS Head") or msg.startswith("NVLS comm"):
        return None
    return ""


def p2p_type(msg: str, proc: ProcFacts, line: int) -> str | None:
    if not msg.startswith("Check P2P Type"):
        return ""
    proc.add("p2p_type", msg[15:].strip()[:120], line)
    return None


def gdr_enabled(msg: str, proc: ProcFacts, line: int) -> str | None:
    i = msg.find("GPU Direct RDMA Enabled for ")
    if i < 0:
        return ""
    proc.add("gdr_enabled", msg[i + 28:].strip()[:160], line)
    return None
