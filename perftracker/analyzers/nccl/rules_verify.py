"""What the node's sysfs could not confirm: settings the rules could not check against the node, and why."""

from __future__ import annotations

from collections.abc import Iterator

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.context import NcclContext, finding, setting_refs

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
