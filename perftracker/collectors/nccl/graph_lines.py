"""The topology and graph lines of an NCCL_DEBUG=INFO log (NCCL_DEBUG_SUBSYS with GRAPH) as process facts.

Promise: each handler takes one message (the text after `NCCL INFO `), records what it shows in the process's
facts and returns None, or "" when the message is not one of its lines; none raises. Values are compact JSON
(bandwidths in GB/s as NCCL models them). The lines and the facts they give: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from perftracker.collectors.nccl.patterns import fact_json


class ProcFacts(Protocol):
    """What a handler needs of a process's facts (lines.ProcFacts)."""

    def add(self, key: str, value: str, line: int) -> None: ...


Handler = Callable[[str, ProcFacts, int], "str | None"]

SYSTEM = re.compile(r"^=== System : max(?:Bw|Width) (?P<max_bw>[\d.]+) total(?:Bw|Width) (?P<total_bw>[\d.]+)")
LINK = re.compile(r"^\+ (?P<type>[A-Z0-9]{2,4})\[(?P<bw>[\d.]{1,16})\] - (?P<to>[A-Z]{2,4}/[0-9A-Fa-f-]{1,40})")
PATH_HEAD = re.compile(r"^(?P<src>(?:GPU|NET)/[0-9A-Fa-f-]{1,40}) :")
PATH_ITEM = re.compile(r"(?P<dst>(?:GPU|NET|CPU|NVS)/[0-9A-Fa-f-]{1,40}) \((?P<hops>\d{1,4})/(?P<bw>[\d.]{1,16})/"
                       r"(?P<type>[A-Z]{2,4})\)")
PATTERN = re.compile(
    r"^Pattern (?P<pattern>\d+), crossNic (?P<cross_nic>\d+), nChannels (?P<nchannels>\d+), (?:bw|speed) "
    r"(?P<bw_intra>[\d.]+)/(?P<bw_inter>[\d.]+), type (?P<type_intra>[A-Z]+)/(?P<type_inter>[A-Z]+), "
    r"sameChannels (?P<same_channels>\d+)")
_MAX_PATHS = 64  # a node's path line names every node of the system: keep the GPUs and NICs, bounded


def _regex_fact(key: str, regex: re.Pattern[str], **types: Callable[[str], object]) -> Handler:
    """A handler recording `key`: the JSON of `regex`'s named groups (each converted by its `types` entry, else
    text) when the message (indentation aside) matches."""
    def handler(msg: str, proc: ProcFacts, line: int) -> str | None:
        m = regex.match(msg.lstrip())
        if m is None:
            return ""
        proc.add(key, fact_json(**{k: types.get(k, str)(v) for k, v in m.groupdict().items()}), line)
        return None
    return handler


system = _regex_fact("topo_system", SYSTEM, max_bw=float, total_bw=float)
tree_link = _regex_fact("topo_link", LINK, bw=float)  # `+ TYPE[bw] - NODE` of the system tree, indented by depth
pattern = _regex_fact("graph_pattern", PATTERN, pattern=int, cross_nic=int, nchannels=int, bw_intra=float,
                      bw_inter=float, same_channels=int)


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
        proc.add("topo_path", fact_json(src=src, dst=dst, hops=int(m.group("hops")), bw=float(m.group("bw")),
                                  type=m.group("type")), line)
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
