"""NCCL rules for the IB/RoCE settings: NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_IB_TC / NCCL_IB_SL,
NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT and NCCL_IB_QPS_PER_CONNECTION."""

from __future__ import annotations

from collections.abc import Iterator

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, Setting, about, finding, is_intended, setting_refs
from perftracker.analyzers.thresholds import threshold_int
from perftracker.formats.nccl_lists import match_list, overmatches, parse_list, syntax_problems
from perftracker.values import strtoll_base0


def _ints(ctx: NcclContext, var: str) -> dict[int, list[Setting]]:
    """Distinct values of `var` as NCCL parses them (echoes are already parsed)."""
    out: dict[int, list[Setting]] = {}
    for s in ctx.settings.get(var, []):
        if s.value.strip():
            out.setdefault(strtoll_base0(s.value)[0], []).append(s)
    return out


def ib_hca(ctx: NcclContext) -> Iterator[Finding]:
    devices = ctx.rdma_devices()
    log_devs = sorted({str(n["hca"]) for p in ctx.procs for n in p.jsons("nic")})
    known = devices or log_devs
    for value, settings in ctx.distinct("NCCL_IB_HCA").items():
        spec = parse_list(value)
        for problem in syntax_problems(spec):
            yield about("NCCL_IB_HCA", settings, "hca_problem", Severity.WARNING,
                        f"NCCL_IB_HCA={value!r}: {problem}", "Write NCCL_IB_HCA as [^][=]dev[:port],dev[:port] "
                        "with no spaces, e.g. NCCL_IB_HCA==mlx5_0:1,mlx5_1:1.", f"syntax|{value}|{problem}")
        if devices and not spec.exclude:
            selected = match_list(spec, devices)
            if not selected:
                yield about("NCCL_IB_HCA", settings, "hca_problem", Severity.CRITICAL,
                            f"NCCL_IB_HCA={value!r} matches no RDMA device", "NCCL will find no device and fall "
                            f"back to TCP sockets. Use the node's devices: {', '.join(devices)}.",
                            f"none|{value}", sysfs_devices=devices)
            missing = [t.name for t in spec.tokens if t.name.strip() and not any(
                d.startswith(t.name) for d in devices)]
            if selected and missing:
                yield about("NCCL_IB_HCA", settings, "hca_problem", Severity.WARNING,
                            f"NCCL_IB_HCA names devices that do not exist: {', '.join(missing)}",
                            f"Remove them or fix the names; present devices: {', '.join(devices)}.",
                            f"missing|{value}", sysfs_devices=devices)
        if known and not is_intended(ctx, "NCCL_IB_HCA", value):
            for token, extra in overmatches(spec, known).items():
                yield about("NCCL_IB_HCA", settings, "hca_problem", Severity.WARNING,
                            f"NCCL_IB_HCA token {token!r} is a prefix: it also selects {', '.join(extra[:6])}",
                            f"Use '=' for exact names: NCCL_IB_HCA={'^' if spec.exclude else ''}="
                            f"{','.join(t.raw for t in spec.tokens)}.", f"prefix|{value}|{token}", devices=known)
    distinct = ctx.distinct("NCCL_IB_HCA")
    if len(distinct) > 1:
        yield finding(
            "hca_problem", Severity.WARNING, f"NCCL_IB_HCA differs across ranks: {', '.join(map(repr, distinct))}",
            "Use one NCCL_IB_HCA value for the whole job (different NIC sets break rail alignment).",
            {"env": [r for v in distinct.values() for r in setting_refs(v, 3)]},
            [s.host for v in distinct.values() for s in v], key="differs", variables=["NCCL_IB_HCA"])


def gid_index(ctx: NcclContext) -> Iterator[Finding]:
    for p in ctx.procs:
        for qp in p.jsons("qp"):
            if qp.get("link_local"):
                yield finding(
                    "gid_problem", Severity.CRITICAL,
                    f"RoCE queue pairs use link-local GID {qp.get('gid_index')} (fe80::) on {p.host}",
                    "A link-local GID cannot be routed across L3: set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID "
                    "(usually 3; see `show_gids`), or leave it unset on NCCL >= 2.21.",
                    {"log": [p.where("qp")]}, [p.host], p.ranks, key=f"qp|{p.host}")
                break
    roce = ctx.roce()
    ports = [(d, port) for d, port in ctx.rdma_ports() if port.get("link_layer") == "Ethernet"]
    hca = ctx.settings.get("NCCL_IB_HCA", [])
    if hca and ports:
        chosen = match_list(parse_list(hca[0].value), sorted({d for d, _ in ports}))
        ports = [(d, port) for d, port in ports if d in chosen] or ports
    for idx, settings in _ints(ctx, "NCCL_IB_GID_INDEX").items():
        if ports:
            for dev, port in ports:
                yield from _gid_slot(idx, dev, port, settings)
        elif idx in (0, 1) and roce and not is_intended(ctx, "NCCL_IB_GID_INDEX", str(idx)):
            yield about("NCCL_IB_GID_INDEX", settings, "gid_problem", Severity.WARNING,
                        f"NCCL_IB_GID_INDEX={idx} on RoCE: on mlx5 GIDs 0/1 are link-local",
                        "Use the RoCE v2 IPv4 GID (usually 3; check with `show_gids`), or leave "
                        "NCCL_IB_GID_INDEX unset on NCCL >= 2.21.", f"idx|{idx}")


def _gid_slot(idx: int, dev: str, port: dict[str, object], settings: list[Setting]) -> list[Finding]:
    gids = {int(g["index"]): g for g in port.get("gids", [])}  # type: ignore[attr-defined]
    where = f"sysfs class/infiniband/{dev}/ports/{port.get('port')}/gids/{idx}"
    good = [i for i, g in sorted(gids.items()) if g.get("type") == "RoCE v2" and g.get("ip")
            and not str(g.get("gid", "")).startswith("fe80")]
    fix = f"Set NCCL_IB_GID_INDEX={good[0]} (RoCE v2 with an IPv4 address on {dev})" if good else \
        "Assign an IP address to the RoCE netdev so a RoCE v2 GID exists, then use its index"
    g = gids.get(idx)
    if g is None:
        what = "is outside the GID table" if idx >= int(str(port.get("gid_table_len") or 0)) else "is an empty slot"
        problem = (Severity.CRITICAL, what, "with an empty GID NCCL fails (ibv_modify_qp: No such device)", "slot", where)
    elif str(g.get("gid", "")).lower().startswith("fe80"):
        problem = (Severity.CRITICAL, "is a link-local GID", "link-local GIDs do not route across subnets "
                   "(RETRY_EXC_ERR, status 12)", "ll", f"{where} = {g.get('gid')}")
    elif g.get("type") and g.get("type") != "RoCE v2":
        problem = (Severity.WARNING, "is a RoCE v1 GID", "RoCE v1 is not routable across L3", "v1",
                   f"{where} type {g.get('type')}")
    else:
        return []
    severity, what, why, key, sysfs = problem
    return [about("NCCL_IB_GID_INDEX", settings, "gid_problem", severity, f"NCCL_IB_GID_INDEX={idx} {what} on {dev}",
                  f"{fix}; {why}.", f"{key}|{dev}|{idx}", sysfs=sysfs)]


def tc_sl(ctx: NcclContext) -> Iterator[Finding]:
    for tc, settings in _ints(ctx, "NCCL_IB_TC").items():
        if not 0 <= tc <= 255:
            yield about("NCCL_IB_TC", settings, "ib_tc", Severity.CRITICAL, f"NCCL_IB_TC={tc} is outside 0-255",
                        "TC is the 8-bit traffic class: TC = DSCP << 2 (DSCP 34 gives 136).", f"range|{tc}")
        elif 0 < tc < 64:
            yield about("NCCL_IB_TC", settings, "ib_tc", Severity.WARNING,
                        f"NCCL_IB_TC={tc} looks like a DSCP value, not a traffic class",
                        f"TC = DSCP << 2: for DSCP {tc} set NCCL_IB_TC={tc << 2}.", f"dscp|{tc}",
                        dscp_if_tc=tc >> 2)
        elif tc % 4:
            yield about("NCCL_IB_TC", settings, "ib_tc", Severity.INFO,
                        f"NCCL_IB_TC={tc} sets ECN bits (TC % 4 = {tc % 4})",
                        f"Usually harmless; the DSCP part is {tc >> 2}. Use {tc & ~3} for a clean value.",
                        f"ecn|{tc}")
    for sl, settings in _ints(ctx, "NCCL_IB_SL").items():
        if not 0 <= sl <= 15:
            yield about("NCCL_IB_SL", settings, "ib_sl", Severity.CRITICAL, f"NCCL_IB_SL={sl} is outside 0-15",
                        "The service level is 4 bits; QP setup fails or truncates. Use the fabric's RDMA "
                        "priority (e.g. 5 on PAI Lingjun).", f"range|{sl}")


def _default_timeout(version: tuple[int, int, int] | None) -> int | None:
    if version is None:
        return None
    if version[:2] <= (2, 13):
        return 14
    return 18 if version[:2] <= (2, 22) else 20


def timeout_retry(ctx: NcclContext) -> Iterator[Finding]:
    version = ctx.version()
    default = _default_timeout(version)
    prof = ctx.profile_value("NCCL_IB_TIMEOUT")
    prof_int = strtoll_base0(prof)[0] if prof else None
    for t, settings in _ints(ctx, "NCCL_IB_TIMEOUT").items():
        if t <= 0 or t >= 32:
            yield about("NCCL_IB_TIMEOUT", settings, "ib_timeout", Severity.CRITICAL,
                        f"NCCL_IB_TIMEOUT={t} means an infinite ACK timeout", "Use 1-31 (4.096 us x 2^value); 0 "
                        f"or >= 32 hides real link failures forever. Recommended: {prof or 22}.", f"inf|{t}")
            continue
        if default is not None and t < default:
            yield about("NCCL_IB_TIMEOUT", settings, "ib_timeout", Severity.WARNING,
                        f"NCCL_IB_TIMEOUT={t} is below NCCL {'.'.join(map(str, version or ()))}'s default {default}",
                        "A low timeout gives spurious RETRY_EXC_ERR (status 12) under congestion; unset it or "
                        f"use >= {default}.", f"low|{t}", nccl_default=default)
        if prof_int is not None and t < prof_int:
            yield about("NCCL_IB_TIMEOUT", settings, "ib_timeout", Severity.WARNING,
                        f"NCCL_IB_TIMEOUT={t} is below the {ctx.profile.get('name')} profile's {prof_int}",
                        f"Set NCCL_IB_TIMEOUT={prof_int}. {ctx.profile_why('NCCL_IB_TIMEOUT')}", f"prof|{t}",
                        profile=prof_int)
        if t >= threshold_int("nccl.ib_timeout_high"):
            yield about("NCCL_IB_TIMEOUT", settings, "ib_timeout", Severity.WARNING,
                        f"NCCL_IB_TIMEOUT={t}: about {4.096e-6 * 2 ** t * 7 / 60:.0f} min before a link error "
                        "surfaces", "Use 20-23 so a dead link fails the job in seconds to minutes.", f"high|{t}")
    for r, settings in _ints(ctx, "NCCL_IB_RETRY_CNT").items():
        if r > 7 or r < 0:
            yield about("NCCL_IB_RETRY_CNT", settings, "ib_retry", Severity.CRITICAL,
                        f"NCCL_IB_RETRY_CNT={r} is outside the 3-bit range 0-7",
                        "Use 7 (NCCL's default); larger values fail QP setup or are truncated.", f"r|{r}")
        elif r == 0:
            yield about("NCCL_IB_RETRY_CNT", settings, "ib_retry", Severity.WARNING,
                        "NCCL_IB_RETRY_CNT=0: any lost packet is fatal", "Use 7 (NCCL's default).", "r0")


def qps(ctx: NcclContext) -> Iterator[Finding]:
    prof = ctx.profile_value("NCCL_IB_QPS_PER_CONNECTION")
    want = strtoll_base0(prof)[0] if prof else None
    values = _ints(ctx, "NCCL_IB_QPS_PER_CONNECTION")
    for q, settings in values.items():
        if q <= 0 or q > 128:
            yield about("NCCL_IB_QPS_PER_CONNECTION", settings, "ib_qps",
                        Severity.CRITICAL if q <= 0 else Severity.WARNING,
                        f"NCCL_IB_QPS_PER_CONNECTION={q} is outside 1-128",
                        f"Use {want or 1}-8; 0 creates no queue pair, huge values exhaust HCA resources.",
                        f"range|{q}")
        elif want is not None and q < want and ctx.roce() is not False:
            yield about("NCCL_IB_QPS_PER_CONNECTION", settings, "ib_qps", Severity.WARNING,
                        f"NCCL_IB_QPS_PER_CONNECTION={q} is below the {ctx.profile.get('name')} profile's {want}",
                        f"Set NCCL_IB_QPS_PER_CONNECTION={want}: {ctx.profile_why('NCCL_IB_QPS_PER_CONNECTION')}",
                        f"prof|{q}", profile=want)
