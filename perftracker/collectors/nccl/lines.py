"""Turn one NCCL message (the text after `NCCL INFO `) into facts of its process.

Promise: `classify_message` never raises on any input. It dispatches on the message's first characters through
one prefix table before any regular expression, and returns None when the line was understood, "" when it was
not, and "VAR=VALUE" for an environment echo (the caller turns those into config rows).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from perftracker.collectors.nccl import graph_lines as G
from perftracker.collectors.nccl import patterns as P
from perftracker.values import MAX_RANK, ascii_int


@dataclass(slots=True, eq=False)
class ProcFacts:
    """Facts of one process (host, pid) inside one file: (key, value) -> [first line, count]."""

    host: str
    pid: int
    device: int
    first_line: int = -1
    ranks: set[int] = field(default_factory=set)
    facts: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    others: int = 0

    def add(self, key: str, value: str, line: int) -> None:
        slot = self.facts.get((key, value))
        if slot is None:
            self.facts[(key, value)] = [line, 1]
        else:
            slot[1] += 1


def _add_rank(proc: ProcFacts, text: str) -> None:
    """A rank a line names, kept only when it is one (0 .. MAX_RANK, ASCII digits)."""
    rank = ascii_int(text, 0, MAX_RANK)
    if rank is not None:
        proc.ranks.add(rank)


def _ifaces(text: str) -> list[tuple[str, str]]:
    return [(m.group("iface"), m.group("addr")) for m in P.IFACE.finditer(text)]


def classify_message(msg: str, proc: ProcFacts, line: int) -> str | None:
    """Record the facts `msg` shows in `proc`; see the module docstring for the return value."""
    try:
        return _classify(msg, proc, line)
    except (ValueError, IndexError, AttributeError):
        return ""


Handler = Callable[[str, ProcFacts, int], "str | None"]


def _classify(msg: str, proc: ProcFacts, line: int) -> str | None:
    """The handler of the message's first four characters (`_EARLY`, then the `comm 0x` lines, then `_PREFIXES`),
    else the rules on its content."""
    c4 = msg[:4]
    early = _EARLY.get(c4)
    if early is not None:
        return early(msg, proc, line)
    if "comm 0x" in msg[:40]:
        return _comm(msg, proc, line)
    return _PREFIXES.get(c4, _by_content)(msg, proc, line)


def _ring(msg: str, proc: ProcFacts, line: int) -> str | None:
    if " via " in msg:
        proc.add("via", msg[msg.find(" via ") + 5:], line)
    else:
        proc.add("ring", msg[5:7], line)
    return None


def _tree(msg: str, proc: ProcFacts, line: int) -> str | None:
    proc.add("tree", "Trees" if msg.startswith("Trees") else "Tree", line)
    return None


def _init(msg: str, proc: ProcFacts, line: int) -> str | None:
    """`Init timings ...` (the communicator's init, by phase); any other `Init...` line (`Initialized NET plugin
    IB`) is a plugin line."""
    m = P.INIT_TIMINGS.search(msg)
    if m is None:
        return _plugins(msg, proc, line)
    pairs = (item.split() for item in (m.group("parts") or "").split(","))
    parts = {bits[0]: float(bits[1]) for bits in pairs if len(bits) == 2}
    _add_rank(proc, m.group("rank"))
    proc.add("nranks", m.group("nranks"), line)
    proc.add("init_timings", P.fact_json(rank=int(m.group("rank")), total=float(m.group("total")),
                                 fn=m.group("fn"), parts=parts), line)
    return None


def _bootstrap(msg: str, proc: ProcFacts, line: int) -> str | None:
    if "timings" in msg:
        proc.add("bootstrap_timings", msg[msg.find("total"):], line)
        return None
    if "no socket interface" in msg:
        proc.add("bootstrap", P.fact_json(error=msg), line)
        return None
    for iface, addr in _ifaces(msg):
        proc.add("bootstrap", P.fact_json(iface=iface, addr=addr), line)
    return None


def _using(msg: str, proc: ProcFacts, line: int) -> str | None:
    if msg.startswith("Using network "):
        proc.add("network", msg[14:].strip(), line)
    elif msg.startswith("Using internal Network "):  # NCCL 2.3
        proc.add("network", msg[23:].strip(), line)
    elif msg.startswith("Using non-device net plugin"):
        proc.add("net_plugin", "non-device", line)
    else:
        return ""
    return None


def _connected(msg: str, proc: ProcFacts, line: int) -> str | None:
    m = P.CONNECTED_RINGS.search(msg)
    if m is not None:
        proc.add("connected_rings", P.fact_json(pxn=m.group("pxn"), gdr=m.group("gdr")), line)
    else:
        proc.add("connected", msg[:40], line)
    return None


def _failed(msg: str, proc: ProcFacts, line: int) -> str | None:
    if "libibverbs" not in msg:
        return _by_content(msg, proc, line)
    proc.add("ibverbs_missing", msg, line)
    return None


def _cuda(msg: str, proc: ProcFacts, line: int) -> str | None:
    if not msg.startswith("cudaDriverVersion"):
        return _by_content(msg, proc, line)
    proc.add("cuda_driver", msg[18:].strip(), line)
    return None


def _by_content(msg: str, proc: ProcFacts, line: int) -> str | None:
    """The lines known by what they hold, not how they start (channel summaries, error chains, IB errors)."""
    if msg[:1].isdigit():
        m = P.CHANNEL_SUMMARY.match(msg)
        if m is not None:
            proc.add("channels", P.fact_json(coll=m.group("coll"), collnet=m.group("collnet"),
                                     nvls=m.group("nvls"), p2p=m.group("p2p")), line)
            return None
    if " -> " in msg:
        m = P.ERROR_CHAIN.match(msg)
        if m is not None:
            proc.add("error_chain", P.fact_json(src=f"{m.group('src')}:{m.group('line')}", code=int(m.group("code")),
                                        thread=m.group("thread")), line)
            return None
    if "Got completion from peer" in msg or "Got CQE with error" in msg:
        return _net(msg[msg.find("NET/IB"):] if "NET/IB" in msg else msg, proc, line)
    if "GPU Direct RDMA Disabled" in msg:
        return _net(msg, proc, line)
    if "GPU Direct RDMA Enabled" in msg:
        return G.gdr_enabled(msg, proc, line)
    if msg[:1] == " " or msg[:1] == "+":  # the system tree's links, indented by depth
        return G.tree_link(msg, proc, line)
    if "Call to ibv_" in msg or "ibv_open_device" in msg:
        proc.add("ib_open_failed" if "open_device" in msg else "ibv_error", msg, line)
        return None
    return ""


def _channel(msg: str, proc: ProcFacts, line: int) -> str | None:
    v = msg.find(" via ")
    if v >= 0:
        proc.add("via", msg[v + 5:], line)
        return None
    m = P.RING_LISTING.match(msg)
    if m is not None:
        proc.add("channel_count", str(int(m.group("n"))), line)
        return None
    return ""


def _net(msg: str, proc: ProcFacts, line: int) -> str | None:
    if msg.startswith("NET/IB"):
        body = msg[6:].lstrip(" :")
        if body.startswith("Using interface"):  # 2.3 sideband interface
            proc.add("oob", P.fact_json(iface=body.split()[2]), line)
            return None
        if body.startswith(("Using", "[")):
            for m in P.IB_DEVICE.finditer(body):
                proc.add("nic", P.fact_json(hca=m.group("hca"), port=int(m.group("port")), link_layer=m.group("ll"),
                                    sharp=bool(m.group("sharp")) or None), line)
            if "[RO]" in body:
                proc.add("ib_ro", "1", line)
            oob = P.OOB.search(body)
            if oob is not None:
                proc.add("oob", P.fact_json(iface=oob.group("iface"), addr=oob.group("addr")), line)
            if "/SHARP" in body:
                proc.add("sharp", "1", line)
            return None
        if body.startswith("No device found"):
            proc.add("ib_no_device", "1", line)
            return None
        if "GPU Direct RDMA Enabled" in body:
            return G.gdr_enabled(body, proc, line)
        if "GPU Direct RDMA Disabled" in body:
            gm = P.GDR_DISABLED.search(body)
            proc.add("gdr_disabled", gm.group("what") if gm else body, line)
            return None
        if "Got completion from peer" in body:
            cm = P.COMPLETION.search(body)
            if cm is None:
                proc.add("completion_error", P.fact_json(text=body[:200]), line)
                return None
            status = cm.group("num") or cm.group("status")
            proc.add("completion_error", P.fact_json(
                peer=cm.group("peer"), status=int(status) if status.isascii() and status.isdigit() else status,
                opcode=cm.group("opcode"), vendor_err=int(cm.group("vendor")) if cm.group("vendor") else None,
                direction=cm.group("dir"), local_gid=cm.group("lgid"), remote_gid=cm.group("rgid"),
                hca=_after(body, " hca ")), line)
            return None
        if "Got CQE with error" in body:
            proc.add("cqe_error", body[:200], line)
            return None
        if "Unable to open device" in body:
            proc.add("ib_open_failed", body.rsplit(" ", 1)[-1], line)
            return None
        qm = P.QP_INFO.match(msg)
        if qm is not None:
            rest = qm.group("rest")
            g = P.QP_GID.search(rest)
            lid = P.QP_LID.search(rest)
            proc.add("qp", P.fact_json(dev=int(qm.group("dev")), port=int(qm.group("port")),
                               gid_index=int(g.group("idx")) if g else None,
                               gid_prefix=g.group("prefix") if g else None,
                               gid_iid=g.group("iid") if g else None,
                               link_local=P.gid_prefix_is_link_local(g.group("prefix")) if g else None,
                               lid=int(lid.group("lid")) if lid else None), line)
            return None
        return ""
    if msg.startswith("NET/Socket"):
        body = msg[10:].lstrip(" :")
        if body.startswith("Using"):
            for iface, addr in _ifaces(body):
                proc.add("socket_if", P.fact_json(iface=iface, addr=addr), line)
            return None
        if "interfaces found" in body or "no interface" in body:
            proc.add("socket_ifcount", body, line)
            return None
        return ""
    if msg.startswith("NET/Plugin"):
        return _plugins(msg, proc, line)
    if G.PATH_HEAD.match(msg):  # NET/0 :GPU/... (a NIC's paths)
        return G.paths(msg, proc, line)
    if msg.startswith("NET : Using interface"):  # NCCL 2.3 socket / bootstrap interface
        for iface, addr in _ifaces(msg[21:]):
            proc.add("bootstrap", P.fact_json(iface=iface, addr=addr), line)
        return None
    return ""


def _plugins(msg: str, proc: ProcFacts, line: int) -> str | None:
    if "No plugin found" in msg or "Using internal network plugin" in msg:
        proc.add("net_plugin", "internal", line)
        return None
    m = P.PLUGIN_LOADED.search(msg)
    if m is not None and "Loaded net plugin" in msg:
        proc.add("net_plugin", P.plugin_name(m.group("name")), line)
        return None
    if msg.startswith("Plugin Path"):
        proc.add("plugin_path", msg.split(":", 1)[1].strip(), line)
        return None
    if msg.startswith("P2P plugin"):
        proc.add("net_plugin", msg.split(" ", 2)[2].strip() if msg.count(" ") >= 2 else msg, line)
        return None
    if "Plugin name set by env to" in msg:
        proc.add("env", "NCCL_NET_PLUGIN=" + msg.rsplit(" ", 1)[-1], line)
        return "NCCL_NET_PLUGIN=" + msg.rsplit(" ", 1)[-1]
    if msg.startswith(("Initialized NET plugin", "Assigned NET plugin")):
        name = msg.split(" plugin ", 1)[1]
        proc.add("net_plugin", re.sub(r" to comm.*$", "", name).strip(), line)
        return None
    if msg.startswith(("NET/Plugin", "TUNER/Plugin", "PROFILER/Plugin", "Plugin version")):
        proc.add("plugin_note", msg[:160], line)
        return None
    return ""


def _nccl_prefixed(msg: str, proc: ProcFacts, line: int) -> str | None:
    if msg.startswith("NCCL version"):
        m = P.VERSION.search(msg)
        if m is not None:
            proc.add("version", m.group("ver"), line)
        return None
    m = P.ENV_ECHO.match(msg)
    if m is not None:
        value = P.env_echo_value(m.group("val")).strip()
        proc.add("env", f"{m.group('var')}={value}", line)
        return f"{m.group('var')}={value}"
    return ""


def _comm(msg: str, proc: ProcFacts, line: int) -> str | None:
    m = P.COMM_INIT.search(msg)
    if m is not None:
        rank = int(m.group("rank"))
        _add_rank(proc, m.group("rank"))
        proc.add("nranks", m.group("nranks"), line)
        key = "init_complete" if m.group("state") == "COMPLETE" else "init_start"
        proc.add(key, P.fact_json(rank=rank, nranks=int(m.group("nranks")), cuda_dev=int(m.group("cuda")),
                          bus_id=m.group("bus"), comm_id=m.group("commid"), comm=m.group("comm"),
                          fn=m.group("fn")), line)
        return None
    m2 = P.COMM_NODES.search(msg)
    if m2 is not None:
        _add_rank(proc, m2.group("rank"))
        proc.add("nranks", m2.group("nranks"), line)
        proc.add("nnodes", m2.group("nnodes"), line)
        proc.add("local_ranks", m2.group("local"), line)
        return None
    return ""


def _after(text: str, marker: str) -> str | None:
    words = text.partition(marker)[2].split()
    return words[0] if words else None


# First four characters -> handler, tried before the `comm 0x` lines (the most common lines first)
_EARLY: dict[str, Handler] = {
    "Chan": _channel,
    "Ring": _ring,
    "Tree": _tree,
    "NET/": _net,
    "NET ": _net,
    "NCCL": _nccl_prefixed,
}
# First four characters -> handler, after them; else (and where `_failed` / `_cuda` find not theirs) `_by_content`
_PREFIXES: dict[str, Handler] = {
    "Init": _init,  # Init timings; Initialized NET plugin
    "Boot": _bootstrap,
    "Usin": _using,
    "Conn": _connected,
    "Fail": _failed,
    "cuda": _cuda,
    "Plug": _plugins,
    "P2P ": _plugins,
    "TUNE": _plugins,
    "PROF": _plugins,
    "Assi": _plugins,  # Assigned NET plugin
    "=== ": G.system,
    "GPU/": G.paths,
    "Patt": G.pattern,
    "NVLS": G.nvls,
    "Chec": G.p2p_type,
}
