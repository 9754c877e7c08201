"""Shared helpers for the NCCL tests: paths, a fake sysfs tree laid out like the kernel's, a Store builder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perftracker.collectors.counters.sysfs import ZERO_GID, read_sysfs
from perftracker.collectors.env import env_rows
from perftracker.collectors.nccl.profiles import load_profile
from perftracker.store import RunInfo, Store
from perftracker.store.schema import conform

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
SHARED_LOGS = Path(__file__).resolve().parents[2] / ".." / "shared" / "nccl_logs"


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _ipv4_gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def build_sysfs(root: Path, rdma: list[dict[str, Any]], ifaces: tuple[str, ...] = ("lo",)) -> Path:
    """A fake /sys: devices/pci.../<bdf>/infiniband/<dev> with a relative class/infiniband symlink,
    a `device` link to the PCI function holding net/<ifname>, GID slots in the kernel's text format,
    and dangling gid_attrs links for empty slots (open() fails like EINVAL)."""
    for i, dev in enumerate(rdma):
        name = dev["name"]
        bdf = f"0000:{0x10 + i:02x}:00.0"
        pci = root / "devices" / "pci0000:00" / bdf
        ibdir = pci / "infiniband" / name
        netdev = dev.get("netdev", f"eth{i}")
        _w(pci / "numa_node", "0")
        _w(pci / "net" / netdev / "operstate", "up")
        _w(ibdir / "node_type", "1: CA")
        port = ibdir / "ports" / "1"
        _w(port / "state", dev.get("state", "4: ACTIVE"))
        _w(port / "phys_state", "5: LinkUp")
        _w(port / "rate", "200 Gb/sec (4X HDR)")
        ll = dev.get("link_layer", "Ethernet")
        _w(port / "link_layer", ll)
        _w(port / "lid", "0x0" if ll == "Ethernet" else "0x1a")
        gids = dev.get("gids")
        if gids is None:
            ll_gid = "fe80:0000:0000:0000:0a8a:41fe:ff21:a75e"
            v4 = _ipv4_gid(dev.get("ip", f"10.0.0.{i + 1}"))
            gids = {0: (ll_gid, "IB/RoCE v1"), 1: (ll_gid, "RoCE v2"), 2: (v4, "IB/RoCE v1"), 3: (v4, "RoCE v2")}
        for idx in range(dev.get("table_len", 8)):
            if idx in gids:
                gid, gtype = gids[idx]
                _w(port / "gids" / str(idx), gid)
                _w(port / "gid_attrs" / "types" / str(idx), gtype)
                _w(port / "gid_attrs" / "ndevs" / str(idx), netdev)
            else:
                _w(port / "gids" / str(idx), ZERO_GID)
                for sub in ("types", "ndevs"):
                    link = port / "gid_attrs" / sub / str(idx)
                    link.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink("../../../nonexistent", link)
        os.symlink("../..", ibdir / "device")
        cls = root / "class" / "infiniband"
        cls.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../devices/pci0000:00/{bdf}/infiniband/{name}", cls / name)
        net_cls = root / "class" / "net"
        net_cls.mkdir(parents=True, exist_ok=True)
        if not (net_cls / netdev).exists():
            os.symlink(f"../../devices/pci0000:00/{bdf}/net/{netdev}", net_cls / netdev)
    for name in ifaces:
        _w(root / "devices" / "virtual" / "net" / name / "operstate", "unknown")
        (root / "class" / "net").mkdir(parents=True, exist_ok=True)
        if not (root / "class" / "net" / name).exists():
            os.symlink(f"../../devices/virtual/net/{name}", root / "class" / "net" / name)
    return root


def lingjun_node(root: Path) -> Path:
    """A node matching the PAI Lingjun profile: mlx5_0..3 RoCE v2 at GID 3, eth0..eth3."""
    return build_sysfs(root, [{"name": f"mlx5_{i}", "netdev": f"eth{i}", "ip": f"10.0.{i}.5"} for i in range(4)],
                       ifaces=("lo", "docker0"))


@pytest.fixture
def make_store() -> Callable[..., Store]:
    """Store from env dicts (per rank), NCCL frames, a sysfs root and a profile name."""

    def make(envs: list[dict[str, str]] | None = None, sysfs_root: Path | None = None, profile: str = "generic",
             frames: dict[str, pd.DataFrame] | None = None, host: str = "node0") -> Store:
        rows: list[dict[str, object]] = []
        for i, env in enumerate(envs or []):
            rows.extend(env_rows(env, source="env", evidence=f"test rank {i}", host=env.get("HOSTNAME", host),
                                 rank=int(env.get("RANK", i))))
        config = conform("config", pd.DataFrame(rows))
        tables = dict(frames or {})
        if "config" in tables:
            config = conform("config", pd.concat([config, tables["config"]], ignore_index=True))
        tables["config"] = config
        sysfs = [read_sysfs(sysfs_root, host=host)] if sysfs_root is not None else []
        return Store(tables=tables, run_info=RunInfo(nccl_profile=load_profile(profile), sysfs=sysfs))

    return make
