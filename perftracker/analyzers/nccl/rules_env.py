"""NCCL rules about the environment as a whole: values NCCL parses differently than written, echoes that disagree
with the configuration, values that differ across ranks, deviations from the profile, debugging knobs left on, and
settings the node's sysfs could not confirm (`unverified`)."""

from __future__ import annotations

from collections.abc import Iterator

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, Setting, about, finding, setting_refs
from perftracker.analyzers.thresholds import threshold_int
from perftracker.formats.nccl_lists import match_list, parse_list, selects_within
from perftracker.values import strtoll_base0

INT_VARS = frozenset({
    "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT",
    "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_BUFFSIZE",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_CROSS_NIC", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_NET_GDR_READ",
    "NCCL_IGNORE_CPU_AFFINITY", "NCCL_PXN_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_IB_AR_THRESHOLD",
    "NCCL_CUMEM_ENABLE", "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_IB_FIFO_TC", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
})
# Variables whose value legitimately differs per rank.
_PER_RANK = frozenset({"NCCL_DEBUG_FILE", "NCCL_COMM_ID", "NCCL_HOSTID", "NCCL_LAUNCH_MODE"})
_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")


def loose_integers(ctx: NcclContext) -> Iterator[Finding]:
    """Integer variables written so that NCCL's strtoll(…, 0) reads another number."""
    for var in sorted(INT_VARS & set(ctx.settings)):
        for value, settings in ctx.distinct(var).items():
            configured = [s for s in settings if s.source != "nccl_echo"]
            if not configured or not value.strip():
                continue
            parsed, full = strtoll_base0(value)
            digits = value.strip().lstrip("+-").lower()
            octal = digits.startswith("0") and len(digits) > 1 and not digits.startswith("0x")
            if full and not octal:
                continue
            why = "a leading 0 makes it octal" if octal and full else "NCCL stops at the first non-digit"
            yield about(var, configured, "loose_int", Severity.WARNING,
                        f"{var}={value!r} is read by NCCL as {parsed} ({why})",
                        f"Write the plain decimal number, e.g. {var}={value.strip().lstrip('0') or '0'}"
                        if octal and full else f"Set {var} to a decimal integer; NCCL accepts garbage silently.",
                        f"{var}|{value}", nccl_reads=parsed)


def echo_mismatch(ctx: NcclContext) -> Iterator[Finding]:
    """The value NCCL echoed differs from the configured one."""
    for var in sorted(ctx.settings):
        echoes = ctx.echoed(var)
        configured = ctx.configured(var)
        if not echoes or not configured:
            continue
        for echo in echoes:
            peers = [c for c in configured if (c.rank == echo.rank and c.rank >= 0) or c.host == echo.host] \
                or configured
            for conf in peers[:1]:
                if var in INT_VARS:
                    written = conf.value.strip()
                    meant = int(written) if written.lstrip("-").isdigit() else strtoll_base0(conf.value)[0]
                    same = meant == strtoll_base0(echo.value)[0]
                else:
                    same = conf.value.strip() == echo.value.strip()
                if not same:
                    yield finding(
                        "echo_mismatch", Severity.WARNING,
                        f"{var} was configured as {conf.value!r} but NCCL reports {echo.value!r}",
                        f"Write {var} so NCCL reads what you mean (a plain decimal for integers), and check for a "
                        "second definition (~/.nccl.conf, /etc/nccl.conf, the launcher's -x list).",
                        {"env": setting_refs([conf]), "log": setting_refs([echo])},
                        [echo.host], [echo.rank], key=f"{var}|{conf.value}|{echo.value}", variables=[var])


def inconsistent(ctx: NcclContext) -> Iterator[Finding]:
    """The same NCCL variable with different values on different ranks or hosts of one job."""
    for var in sorted(ctx.settings):
        if not var.startswith("NCCL_") or var in _PER_RANK or var == "NCCL_IB_HCA":
            continue
        by_value: dict[str, list[Setting]] = {}
        for s in ctx.settings[var]:
            norm = str(strtoll_base0(s.value)[0]) if var in INT_VARS and s.value.strip() else s.value.strip()
            by_value.setdefault(norm, []).append(s)
        if len(by_value) < 2:
            continue
        where = {v: sorted({f"{s.host or '?'}/rank {s.rank}" if s.rank >= 0 else s.host or s.evidence
                            for s in ss})[:6] for v, ss in by_value.items()}
        all_s = [s for ss in by_value.values() for s in ss]
        yield finding(
            "inconsistent_env", Severity.WARNING,
            f"{var} differs across the job: {', '.join(repr(v) for v in by_value)}",
            f"Set one value of {var} for every rank (launcher -x / env file shared by all nodes).",
            {"values": where, "env": setting_refs(all_s, 8)}, [s.host for s in all_s], [s.rank for s in all_s],
            key=var, variables=[var])


def profile_deviation(ctx: NcclContext) -> Iterator[Finding]:
    """Values different from the platform profile, or missing from a captured environment."""
    values = ctx.profile.get("values", {})
    have_env = any(s.source != "nccl_echo" for ss in ctx.settings.values() for s in ss)
    name = ctx.profile.get("name", "profile")
    for var, spec in sorted(values.items()):
        want = str(spec["value"])
        why = str(spec.get("consequence", ""))
        settings = ctx.settings.get(var, [])
        if not settings:
            if have_env:
                yield finding("profile", Severity.WARNING, f"{var} is not set ({name} profile: {want})",
                              f"Set {var}={want}. {why}", {"profile": name, "expected": want},
                              key=f"missing|{var}", variables=[var])
            continue
        bad = [s for s in settings if not _conforms(ctx, var, s.value, want)]
        for value in sorted({s.value for s in bad}):
            group = [s for s in bad if s.value == value]
            yield finding("profile", Severity.WARNING, f"{var}={value!r} differs from the {name} profile ({want})",
                          f"Set {var}={want}. {why}", {"profile": name, "expected": want,
                                                       "env": setting_refs(group, 4)},
                          [s.host for s in group], [s.rank for s in group], key=f"{var}|{value}",
                          variables=[var])


def _conforms(ctx: NcclContext, var: str, value: str, want: str) -> bool:
    """A value matches the profile's: integers as NCCL reads them, NCCL_DEBUG in any case, device/interface lists
    as NCCL matches lists (lists.selects_within: the profile's `eth` already covers `eth0`; for NCCL_IB_HCA, where
    the node's devices are known, it must also keep every device the profile selects: fewer NICs is fewer rails)."""
    if var in INT_VARS:
        return strtoll_base0(value)[0] == strtoll_base0(want)[0]
    if var == "NCCL_DEBUG":
        return value.strip().upper() == want.upper()
    if var == "NCCL_SOCKET_IFNAME":
        names = sorted({str(i["name"]) for node in ctx.sysfs for i in node.get("net", [])})
        return selects_within(parse_list(value), parse_list(want), names, ports_matter=False)
    if var != "NCCL_IB_HCA":
        return value == want
    devices = ctx.rdma_devices()
    spec, allowed = parse_list(value), parse_list(want)
    if not selects_within(spec, allowed, devices):
        return False
    return not devices or set(match_list(allowed, devices)) <= set(match_list(spec, devices))


def debug_knobs(ctx: NcclContext) -> Iterator[Finding]:
    """NCCL_ALGO / NCCL_PROTO forced, NCCL_DEBUG unset / TRACE / invalid, SUBSYS=ALL, NCCL_DEBUG_FILE."""
    for var in ("NCCL_ALGO", "NCCL_PROTO"):
        for value, settings in ctx.distinct(var).items():
            yield about(
                var, settings, "forced_tuning", Severity.WARNING,
                f"{var}={value!r} forces NCCL's {'algorithm' if var == 'NCCL_ALGO' else 'protocol'} choice"
                + (" (empty value)" if not value.strip() else ""),
                f"Unset {var} unless a benchmark proved it helps: it is a debugging switch, often left over, and "
                "stops NCCL's tuner from choosing per message size.", f"{var}|{value}")
    have_env = any(s.source != "nccl_echo" for ss in ctx.settings.values() for s in ss)
    debug = ctx.configured("NCCL_DEBUG")
    if have_env and not debug and not ctx.procs:
        yield finding("debug", Severity.INFO, "NCCL_DEBUG is not set: NCCL problems will leave no trace",
                      "Set NCCL_DEBUG=WARN (or INFO with NCCL_DEBUG_FILE=/path/nccl.%h.%p.log) so failures are "
                      "explained in the logs.", {}, key="unset", variables=["NCCL_DEBUG"])
    for value, settings in ctx.distinct("NCCL_DEBUG").items():
        level = value.strip().upper()
        if level == "TRACE":
            yield about("NCCL_DEBUG", settings, "debug", Severity.WARNING, "NCCL_DEBUG=TRACE in a production run",
                        "TRACE logs every call and slows the job; use INFO or WARN.", "trace", ranks=False)
        elif level not in _DEBUG_LEVELS:
            yield about("NCCL_DEBUG", settings, "debug", Severity.WARNING,
                        f"NCCL_DEBUG={value!r} is not a level NCCL knows", "Use VERSION, WARN, INFO or TRACE: an "
                        "unknown value makes NCCL (<= 2.29) log nothing.", f"bad|{value}", ranks=False)
    for value, settings in ctx.distinct("NCCL_DEBUG_SUBSYS").items():
        if "ALL" in [t.strip().upper() for t in value.split(",")] and not value.startswith("^"):
            yield about("NCCL_DEBUG_SUBSYS", settings, "debug", Severity.WARNING,
                        "NCCL_DEBUG_SUBSYS=ALL logs every subsystem",
                        "Use the default subsystems (unset) or INIT,ENV,NET in production.", "subsys-all",
                        ranks=False)
    yield from _debug_file(ctx)


def _ranks_per_host(ctx: NcclContext) -> int:
    local = [strtoll_base0(s.value)[0] for s in ctx.settings.get("LOCAL_WORLD_SIZE", [])]
    per_host: dict[str, set[int]] = {}
    for ss in ctx.settings.values():
        for s in ss:
            if s.rank >= 0:
                per_host.setdefault(s.host, set()).add(s.rank)
    return max([*local, *(len(v) for v in per_host.values()), 0])


def _debug_file(ctx: NcclContext) -> list[Finding]:
    debug = {s.value.strip().upper() for s in ctx.settings.get("NCCL_DEBUG", [])}
    if not debug & {"INFO", "TRACE"}:
        return []
    files = ctx.distinct("NCCL_DEBUG_FILE")
    per_host = _ranks_per_host(ctx)
    if not files and per_host >= threshold_int("nccl.debug_file_ranks_per_host"):
        return [finding("debug", Severity.INFO, f"{per_host} ranks per node log NCCL INFO into the job's output",
                        "Set NCCL_DEBUG_FILE=/path/nccl.%h.%p.log so each process writes its own file "
                        "(interleaved lines are hard to attribute).", {"ranks_per_node": per_host}, key="no-file")]
    out: list[Finding] = []
    for value, settings in files.items():
        if per_host > 1 and "%p" not in value:
            out.append(about("NCCL_DEBUG_FILE", settings, "debug", Severity.WARNING,
                             f"NCCL_DEBUG_FILE={value!r} is the same file for every process", "Add %h and %p (e.g. "
                             "/path/nccl.%h.%p.log): processes overwrite each other's output.", f"file|{value}",
                             ranks=False))
    return out


_WHY = {
    "no_sysfs": "there is no sysfs at {root} (no {root}/class)",
    "missing": "{root}/class/{cls} does not exist{driver}",
    "empty": "{root}/class/{cls} lists no device",
    "permission": "{root}/class/{cls} cannot be read (permission denied)",
}
_CHECKED = (("NCCL_IB_HCA", "rdma", "infiniband"), ("NCCL_IB_GID_INDEX", "rdma", "infiniband"),
            ("NCCL_SOCKET_IFNAME", "net", "net"))


def unverified(ctx: NcclContext) -> Iterator[Finding]:
    for node in ctx.sysfs:
        status = node.get("status") or {}
        root = str(node.get("root", "/sys")).rstrip("/") or "/"
        where = node.get("host") or "this node"
        for var, part, cls in _CHECKED:
            state = str(status.get(part, "ok"))
            settings = [s for s in ctx.configured(var) if s.value.strip()]
            if state == "ok" or not settings:
                continue
            why = _WHY.get(state, "{root}/class/{cls} could not be read").format(
                root=root, cls=cls, driver=" (no RDMA driver loaded)" if cls == "infiniband" else "")
            no_devices = var == "NCCL_IB_HCA" and state in ("missing", "empty") and \
                not all(s.value.startswith("^") for s in settings)
            values = ", ".join(sorted({repr(s.value) for s in settings}))
            consequence = ("If the job runs on this node, NCCL finds no RDMA device and falls back to TCP sockets "
                           "(critical in the NCCL logs): load the RDMA driver or expose the devices to the "
                           "container. " if no_devices else "")
            yield finding(
                "unverified", Severity.WARNING if no_devices else Severity.INFO,
                f"{var}={values} could not be verified on {where}: {why}",
                f"{consequence}To check it, run lint-env on a node the job runs on, or pass --sysfs-root with a "
                "copy of that node's /sys.", {"env": setting_refs(settings, 4), "sysfs_root": root,
                                             "sysfs_status": state}, hosts=[str(node.get("host") or "")],
                key=f"{var}|{root}|{state}")
