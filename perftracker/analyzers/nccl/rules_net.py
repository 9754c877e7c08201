"""NCCL rules about the network path: Socket fallback, socket/bootstrap interfaces, net plugins,
GPUDirect RDMA and intra-node P2P."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, about, finding, is_intended, setting_refs
from perftracker.formats.nccl_lists import match_list, parse_list
from perftracker.values import strtoll_base0

_BAD_IFACE = re.compile(r"^(docker|virbr|flannel|cni|veth|lo$|lo\d|br-|cali|weave|tunl|kube|ifb|tun\d|tap|dummy|vxlan|"
                        r"genev|nodelocaldns|sit\d|ip6tnl|gre|erspan)")


def iface_problem(name: str, addr: str | None) -> str:
    """Why an interface/address is unsuitable for NCCL traffic, "" when it looks fine."""
    if _BAD_IFACE.match(name):
        return f"{name} is a loopback, container bridge or overlay interface"
    if addr is None:
        return ""
    if addr == "":
        return f"{name} has no address"
    ip_text = addr.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(ip_text)
    except ValueError:
        return ""
    if ip.version == 6 and ip.is_link_local:
        return f"{name} has only an IPv6 link-local address ({addr})"
    if ip.is_loopback:
        return f"{name} has a loopback address ({addr})"
    if ip.version == 4 and ip in ipaddress.ip_network("172.17.0.0/16"):
        return f"{name} is on the default docker bridge subnet 172.17.0.0/16 ({addr})"
    return ""


def usable_ifaces(ctx: NcclContext) -> list[str]:
    """The node's interfaces fit to propose for NCCL_SOCKET_IFNAME: not loopback (by name or ARP type 772),
    not a bridge, not a container, overlay or other virtual interface by name (docker*, veth*, ifb*, ...)."""
    return sorted({i["name"] for node in ctx.sysfs for i in node.get("net", [])
                   if not i.get("bridge") and str(i.get("type", "")) != "772"
                   and not iface_problem(str(i["name"]), None)})


def socket_fallback(ctx: NcclContext) -> Iterator[Finding]:
    """A multi-node job on Socket transport while RDMA was available or intended."""
    socket_procs = [p for p in ctx.procs if p.transport == "socket"]
    if not socket_procs or any(p.transport == "ib" for p in ctx.procs) or not ctx.multi_node():
        return
    reasons: list[str] = []
    for p in socket_procs:
        if p.has("ib_no_device"):
            reasons.append(f"NET/IB : No device found. ({p.where('ib_no_device')})")
        if p.has("ibverbs_missing"):
            reasons.append(f"libibverbs could not be loaded ({p.where('ibverbs_missing')})")
    ib_vars = sorted(k for k in ctx.settings if k.startswith("NCCL_IB_") and k != "NCCL_IB_DISABLE")
    if ib_vars:
        reasons.append(f"NCCL_IB_* settings show RDMA was intended: {', '.join(ib_vars)}")
    if ctx.rdma_devices():
        reasons.append(f"RDMA devices exist: {', '.join(ctx.rdma_devices())}")
    disabled = [s for s in ctx.settings.get("NCCL_IB_DISABLE", []) if s.value.strip() not in ("", "0")]
    if disabled:
        reasons.append("NCCL_IB_DISABLE is set: " + "; ".join(setting_refs(disabled, 2)))
    if not reasons:
        return
    yield finding(
        "socket_fallback", Severity.CRITICAL,
        f"Multi-node NCCL traffic runs over TCP sockets, not RDMA ({len(ctx.hosts())} hosts)",
        "Make the RDMA NICs visible to the job (install rdma-core/libibverbs in the image, expose "
        "/dev/infiniband and the mlx5 devices to the container, fix NCCL_IB_HCA), unset NCCL_IB_DISABLE, "
        "and set NCCL_NET=IB so NCCL fails fast instead of silently using sockets.",
        {"reasons": reasons[:10], "log": [p.where("network") if p.has("network") else p.where("via")
                                         for p in socket_procs[:5]]},
        hosts=sorted({p.host for p in socket_procs}))


def ib_disabled(ctx: NcclContext) -> Iterator[Finding]:
    """NCCL_IB_DISABLE / NCCL_NET=Socket while RDMA devices exist or NCCL_IB_* shows RDMA was intended."""
    off = [s for s in ctx.settings.get("NCCL_IB_DISABLE", []) if s.value.strip() and strtoll_base0(s.value)[0] != 0]
    off += [s for s in ctx.settings.get("NCCL_NET", []) if s.value.strip().lower() == "socket"]
    if not off:
        return
    intended = sorted(k for k in ctx.settings if k.startswith("NCCL_IB_") and k != "NCCL_IB_DISABLE")
    devices = ctx.rdma_devices()
    if not intended and not devices:
        return
    yield finding(
        "socket_fallback", Severity.CRITICAL if ctx.multi_node() or devices else Severity.WARNING,
        "The configuration forces NCCL onto TCP sockets although RDMA is " + ("present" if devices else "intended"),
        "Unset NCCL_IB_DISABLE (and NCCL_NET=Socket); multi-node traffic over sockets is many times slower.",
        {"env": setting_refs(off, 4), "sysfs_devices": devices, "ib_settings": intended},
        [s.host for s in off], key="forced", variables=[s.key for s in off])


def ib_devices(ctx: NcclContext) -> Iterator[Finding]:
    """NET/IB found no device or could not open one (hca_problem)."""
    no_dev = [p for p in ctx.procs if p.has("ib_no_device")]
    hca_set = ctx.settings.get("NCCL_IB_HCA", [])
    if no_dev:
        hosts = sorted({p.host for p in no_dev})
        sev = Severity.CRITICAL if (hca_set or ctx.multi_node()) else Severity.WARNING
        cause = ("NCCL_IB_HCA is set but matches no active port: " + "; ".join(setting_refs(hca_set, 2))) \
            if hca_set else "no active RDMA port was visible to NCCL"
        yield finding(
            "hca_problem", sev, f"NCCL found no usable RDMA device on {', '.join(hosts[:4])}"
            + (" ..." if len(hosts) > 4 else ""),
            "Check `ibv_devinfo` inside the job's container (devices, port state ACTIVE), that NCCL_IB_HCA names "
            "existing devices, and that the container has /dev/infiniband.",
            {"cause": cause, "log": [p.where("ib_no_device") for p in no_dev[:5]]}, hosts=hosts)
    failed = [p for p in ctx.procs if p.has("ib_open_failed")]
    if failed:
        yield finding(
            "hca_problem", Severity.CRITICAL, "NCCL could not open an RDMA device",
            "Give the job access to the device (/dev/infiniband/uverbs*, RDMA device plugin) or drop it "
            "from NCCL_IB_HCA.",
            {"log": [f"{p.where('ib_open_failed')}: {p.values('ib_open_failed')[0]}" for p in failed[:5]]},
            hosts=[p.host for p in failed])


def socket_ifaces(ctx: NcclContext) -> Iterator[Finding]:
    """Bootstrap / OOB / NET/Socket interfaces on overlays, bridges, lo or link-local addresses."""
    bad: dict[str, list[str]] = {}
    hosts: dict[str, set[str]] = {}
    for p in ctx.procs:
        for key in ("bootstrap", "oob", "socket_if"):
            for item in p.jsons(key):
                if "iface" not in item:
                    continue
                name = str(item["iface"])
                addr = str(item["addr"]) if "addr" in item else None
                empty = not name and addr in (None, "")
                why = "the OOB interface is empty (no usable interface)" if empty else iface_problem(name, addr)
                if why:
                    bad.setdefault(why, []).append(f"{p.where(key)} ({key})")
                    hosts.setdefault(why, set()).add(p.host)
    for why, refs in bad.items():
        yield finding(
            "bad_socket_iface", Severity.WARNING, f"NCCL uses an unsuitable socket interface: {why}",
            "Set NCCL_SOCKET_IFNAME to the node's data-network interface (e.g. NCCL_SOCKET_IFNAME=eth0, or an "
            "exclusion list like ^docker,lo,veth,flannel,cni,virbr) on every node.",
            {"log": refs[:8]}, hosts=sorted(hosts[why]), key=why, subject="NCCL_SOCKET_IFNAME")
    yield from _ifname_setting(ctx)
    yield from _iface_mismatch(ctx)


def _ifname_setting(ctx: NcclContext) -> Iterator[Finding]:
    ifaces = {i["name"]: i for node in ctx.sysfs for i in node.get("net", [])}
    for value, settings in ctx.distinct("NCCL_SOCKET_IFNAME").items():
        spec = parse_list(value)
        named = [t.name for t in spec.tokens if _BAD_IFACE.match(t.name) and not spec.exclude]
        if named:
            yield about("NCCL_SOCKET_IFNAME", settings, "bad_socket_iface", Severity.WARNING,
                        f"NCCL_SOCKET_IFNAME={value!r} selects {', '.join(named)}",
                        "Point NCCL_SOCKET_IFNAME at the routable data interface (e.g. eth0) instead.",
                        f"ifname-bad|{value}", ranks=False)
        if not ifaces:
            continue
        matched = match_list(spec, list(ifaces))
        usable = usable_ifaces(ctx)
        if not matched:
            yield about(
                "NCCL_SOCKET_IFNAME", settings, "bad_socket_iface", Severity.CRITICAL,
                f"NCCL_SOCKET_IFNAME={value!r} matches no interface on this node",
                f"Use one of the node's interfaces: {', '.join(usable)}." if usable else
                f"This node has no physical interface to propose (only {', '.join(sorted(ifaces))}): point "
                "NCCL_SOCKET_IFNAME at the data-network interface of the nodes the job runs on.",
                f"ifname-none|{value}", ranks=False, sysfs=sorted(ifaces))
            continue
        unwanted = [n for n in matched if n not in usable]
        if unwanted:
            yield about(
                "NCCL_SOCKET_IFNAME", settings, "bad_socket_iface", Severity.WARNING,
                f"NCCL_SOCKET_IFNAME={value!r} also matches {', '.join(unwanted)}",
                (f"Use exact names (NCCL_SOCKET_IFNAME=={','.join(good)}) or an exclusion list."
                 if (good := [n for n in matched if n not in unwanted]) else
                 f"Point it at a physical interface{': ' + ', '.join(usable) if usable else ''}."),
                f"ifname-unwanted|{value}", ranks=False, matched=matched)
        elif len(matched) > 1 and not spec.exact and not is_intended(ctx, "NCCL_SOCKET_IFNAME", value):
            yield about(
                "NCCL_SOCKET_IFNAME", settings, "iface_prefix", Severity.INFO,
                f"NCCL_SOCKET_IFNAME={value!r} is a prefix that matches {len(matched)} interfaces: {', '.join(matched)}",
                "If only one was meant, prefix it with '=' for an exact match (e.g. NCCL_SOCKET_IFNAME==eth0).",
                f"ifname-prefix|{value}", ranks=False, matched=matched)


def _iface_mismatch(ctx: NcclContext) -> Iterator[Finding]:
    per_host: dict[str, set[str]] = {}
    for p in ctx.procs:
        for item in p.jsons("bootstrap"):
            if item.get("iface"):
                per_host.setdefault(p.host, set()).add(str(item["iface"]))
    names = {frozenset(v) for v in per_host.values()}
    if len(names) <= 1:
        return
    families = {re.sub(r"\d.*$", "", n) for v in per_host.values() for n in v}
    if len(families) <= 1:
        return
    yield finding(
        "iface_mismatch", Severity.WARNING, "Nodes bootstrap NCCL over different kinds of interfaces",
        "Set the same NCCL_SOCKET_IFNAME on every node so all ranks use the same network.",
        {"bootstrap": {h: sorted(v) for h, v in sorted(per_host.items())}}, hosts=list(per_host))


def net_plugin(ctx: NcclContext) -> Iterator[Finding]:
    """NCCL_NET_PLUGIN / NCCL_NET naming a plugin that did not load, or an unexpected plugin loaded."""
    loaded = {p.host: v for p in ctx.procs for v in p.values("net_plugin") if v not in ("internal", "non-device")}
    internal = [p for p in ctx.procs if "internal" in p.values("net_plugin")
                or set(p.values("network")) & {"IB", "Socket"}]
    paths = [f"{p.where('plugin_path')}: {p.values('plugin_path')[0]}" for p in ctx.procs if p.has("plugin_path")]
    settings = ctx.settings.get("NCCL_NET_PLUGIN", [])
    wanted = {s.value.strip() for s in settings}
    if not wanted and ctx.profile_value("NCCL_NET_PLUGIN"):
        wanted = {str(ctx.profile_value("NCCL_NET_PLUGIN"))}
    if wanted & {"none", ""} and (loaded or paths):
        yield finding(
            "net_plugin", Severity.WARNING, f"A net plugin was loaded although NCCL_NET_PLUGIN asks for none: "
            f"{', '.join(sorted(set(loaded.values()))) or 'libnccl-net.so'}",
            "Set NCCL_NET_PLUGIN=none on every rank (on NCCL < 2.28 'none' works only because no such library "
            "exists), or remove libnccl-net.so from the image's library path.",
            {"log": paths[:4] or [p.where("net_plugin") for p in ctx.procs if p.has("net_plugin")][:4],
             "env": setting_refs(settings)}, hosts=list(loaded), variables=["NCCL_NET_PLUGIN"])
    named = wanted - {"none", ""}
    if named and internal and not loaded:
        yield finding(
            "net_plugin", Severity.WARNING, f"NCCL_NET_PLUGIN={', '.join(sorted(named))} did not load; NCCL used "
            "its internal transports", "Check that the plugin library is on LD_LIBRARY_PATH inside the job "
            "(libnccl-net-<name>.so) and matches the NCCL version.",
            {"log": [p.where("net_plugin", "internal") if p.has("net_plugin") else p.where("network")
                     for p in internal[:4]], "env": setting_refs(settings)},
            hosts=[p.host for p in internal], variables=["NCCL_NET_PLUGIN"])
    for s_value, settings_net in ctx.distinct("NCCL_NET").items():
        used = {v for p in ctx.procs for v in p.values("network")}
        if used and s_value.strip().lower() not in {u.lower() for u in used}:
            yield finding(
                "net_plugin", Severity.WARNING, f"NCCL_NET={s_value!r} but NCCL used {', '.join(sorted(used))}",
                "Use the exact network name NCCL prints in 'Using network ...' (case-insensitive).",
                {"env": setting_refs(settings_net)}, hosts=[s.host for s in settings_net], variables=["NCCL_NET"])


def gdr(ctx: NcclContext) -> Iterator[Finding]:
    """GPUDirect RDMA disabled on inter-node IB paths."""
    hits = [p for p in ctx.procs if p.has("gdr_disabled")]
    refs = [f"{p.where('gdr_disabled')}: GPU Direct RDMA Disabled for {p.values('gdr_disabled')[0]}" for p in hits]
    for p in ctx.procs:
        if any(r.get("gdr") == "0" for r in p.jsons("connected_rings")) and \
                any(v.startswith("NET/") and "GDRDMA" not in v for v in p.values("via")):
            hits.append(p)
            refs.append(f"{p.where('connected_rings')}: Connected all rings ... GDR 0")
    if not hits:
        return
    yield finding(
        "gdr_disabled", Severity.WARNING, "GPUDirect RDMA is disabled: inter-node traffic is staged through "
        "host memory", "Load the peer-memory module (nvidia-peermem / nv_peer_mem), check ACS/IOMMU settings, "
        "and if the GPU-NIC distance is the cause raise NCCL_NET_GDR_LEVEL (e.g. PHB or SYS).",
        {"log": refs[:8]}, hosts=[p.host for p in hits])


def p2p(ctx: NcclContext) -> Iterator[Finding]:
    """P2P disabled within a node (SHM used between GPUs that could use NVLink/PCIe P2P)."""
    disabled = [s for s in ctx.settings.get("NCCL_P2P_DISABLE", []) if s.value.strip() == "1"]
    shm = [p for p in ctx.procs if any(v.startswith("SHM/") for v in p.values("via"))]
    if disabled:
        yield finding(
            "p2p_disabled", Severity.WARNING, "NCCL_P2P_DISABLE=1: GPUs in a node talk through host shared memory",
            "Unset NCCL_P2P_DISABLE on NVLink/NVSwitch systems; it is a debugging switch.",
            {"env": setting_refs(disabled), "log": [f"{p.where('via')} (SHM)" for p in shm[:4]]},
            hosts=[s.host for s in disabled], ranks=[s.rank for s in disabled], variables=["NCCL_P2P_DISABLE"])
    elif shm:
        yield finding(
            "shm_intra_node", Severity.INFO, "Intra-node channels use SHM instead of P2P",
            "If these GPUs share NVLink, P2P is disabled or unavailable: check NCCL_P2P_DISABLE / NCCL_P2P_LEVEL "
            "and that the container shares IPC (--ipc=host) with CUDA P2P allowed.",
            {"log": [f"{p.where('via')}" for p in shm[:4]]}, hosts=[p.host for p in shm])
