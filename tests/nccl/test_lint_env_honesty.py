"""`lint-env` says what it could not verify, proposes only real interfaces, and matches list values as NCCL.

Fake sysfs trees as the other NCCL tests build them; the CLI through typer's runner.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from perftracker.cli import lint_env
from perftracker.cli.voice import add_command
from perftracker.collectors.counters import sysfs
from perftracker.formats.nccl_lists import parse_list, selects_within

from .conftest import FIXTURES, build_sysfs, lingjun_node

app = typer.Typer()
add_command(app, "lint-env", lint_env.lint_env)


@app.callback()
def _root() -> None:
    """Test app."""


def _lint_json(env: str, root: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    env_file = root.parent / "job.env"
    env_file.write_text(env)
    result = CliRunner().invoke(app, ["lint-env", "--env-file", str(env_file), "--sysfs-root", str(root), "--json",
                                      *args])
    return result.exit_code, json.loads(result.output)


def _node_without_rdma(tmp_path: Path, ifaces: tuple[str, ...] = ("lo", "eth0")) -> Path:
    return build_sysfs(tmp_path / "sys", [], ifaces=ifaces)


def _by_flag(found: list[dict[str, Any]], flag: str) -> list[dict[str, Any]]:
    return [p | {"merged_into": f["title"]} for f in found
            for p in [{"flag": f["evidence"]["flag"], "severity": f["severity"], "title": f["title"],
                       "recommendation": f["recommendation"]}, *f["evidence"].get("problems", [])]
            if p["flag"] == flag]


def test_hca_on_a_node_without_class_infiniband_is_not_passed_silently(tmp_path: Path) -> None:
    # GIVEN a node whose sysfs has class/net but no class/infiniband (no RDMA driver)
    root = _node_without_rdma(tmp_path)
    assert not (root / "class" / "infiniband").exists()
    # WHEN lint-env checks NCCL_IB_HCA=mlx5_0,mlx5_9
    code, found = _lint_json("NCCL_IB_HCA=mlx5_0,mlx5_9\n", root, "--fail-on", "warning")
    # THEN a warning says it could not be verified, why, and what NCCL will do on this node
    unverified = _by_flag(found, "unverified")
    assert len(unverified) == 1 and unverified[0]["severity"] == "warning"
    assert "could not be verified" in unverified[0]["title"]
    assert "class/infiniband does not exist" in unverified[0]["title"]
    assert "falls back to TCP sockets" in unverified[0]["recommendation"]
    assert code == 3


def test_empty_class_infiniband_is_said_as_no_device(tmp_path: Path) -> None:
    # GIVEN a node with an empty /sys/class/infiniband
    root = _node_without_rdma(tmp_path)
    (root / "class" / "infiniband").mkdir()
    # WHEN lint-env checks NCCL_IB_HCA and NCCL_IB_GID_INDEX
    _, found = _lint_json("NCCL_IB_HCA=mlx5\nNCCL_IB_GID_INDEX=3\n", root)
    # THEN both say the class lists no device; the HCA one warns, the GID one informs
    unverified = {p["title"].split("=")[0]: p for p in _by_flag(found, "unverified")}
    assert set(unverified) == {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX"}
    assert all("lists no device" in p["title"] for p in unverified.values())
    assert unverified["NCCL_IB_HCA"]["severity"] == "warning"
    assert unverified["NCCL_IB_GID_INDEX"]["severity"] == "info"


def test_a_root_without_sysfs_is_said(tmp_path: Path) -> None:
    # GIVEN a --sysfs-root that is a folder but no sysfs (no class/)
    root = tmp_path / "sys"
    root.mkdir()
    # WHEN lint-env checks an interface and an HCA
    _, found = _lint_json("NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5_0\n", root)
    # THEN each says there is no sysfs there, as an info (nothing says the job runs on this machine)
    unverified = _by_flag(found, "unverified")
    assert len(unverified) == 2
    assert all("no sysfs" in p["title"] and p["severity"] == "info" for p in unverified)


def test_an_unreadable_class_is_said_as_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a node whose class/infiniband cannot be read (tests run as root, so access() is what denies)
    root = lingjun_node(tmp_path / "sys")
    real_access = os.access
    monkeypatch.setattr(sysfs.os, "access", lambda p, mode: not str(p).endswith("infiniband") and real_access(p, mode))
    # WHEN its status is read, and lint-env checks an HCA
    assert sysfs.class_status(root, "infiniband") == "permission"
    _, found = _lint_json("NCCL_IB_HCA=mlx5_0\n", root)
    # THEN the finding says permission denied
    assert any("permission denied" in p["title"] for p in _by_flag(found, "unverified"))


def test_a_node_with_rdma_devices_has_nothing_unverified(tmp_path: Path) -> None:
    # GIVEN the Lingjun node, with its mlx5 devices
    _, found = _lint_json("NCCL_IB_HCA=mlx5\nNCCL_SOCKET_IFNAME=eth\n", lingjun_node(tmp_path / "sys"))
    # THEN nothing is said to be unverified
    assert _by_flag(found, "unverified") == []


def test_interfaces_proposed_are_never_loopback_bridges_or_virtual(tmp_path: Path) -> None:
    # GIVEN a node with eth0 beside lo, ifb0, docker0, veth1a2b, virbr0 and a bridge br0
    root = _node_without_rdma(tmp_path, ifaces=("lo", "ifb0", "docker0", "veth1a2b", "virbr0", "br0", "eth0"))
    (root / "class" / "net" / "br0" / "bridge").mkdir()
    # WHEN NCCL_SOCKET_IFNAME names no interface of the node
    _, found = _lint_json("NCCL_SOCKET_IFNAME=ens\n", root)
    # THEN the fix proposes eth0 alone
    fix = next(p for p in _by_flag(found, "bad_socket_iface") if "matches no interface" in p["title"])
    assert fix["recommendation"] == "Use one of the node's interfaces: eth0."


def test_a_node_with_only_virtual_interfaces_proposes_none(tmp_path: Path) -> None:
    # GIVEN a node with lo and ifb0 only
    root = _node_without_rdma(tmp_path, ifaces=("lo", "ifb0"))
    # WHEN NCCL_SOCKET_IFNAME names no interface of the node
    _, found = _lint_json("NCCL_SOCKET_IFNAME=ens\n", root)
    # THEN no interface is proposed to use
    fix = next(p for p in _by_flag(found, "bad_socket_iface") if "matches no interface" in p["title"])
    assert "Use one of" not in fix["recommendation"] and "no physical interface" in fix["recommendation"]


@pytest.mark.parametrize("value,differs", [
    ("eth0", False), ("=eth0", False), ("eth", False), ("eth0,eth1", False),
    ("ens", True), ("^docker", True),
    ("e", False),  # on this node 'e' selects eth0..eth3 only: what the profile's 'eth' selects
])
def test_socket_ifname_against_the_profile_prefix(tmp_path: Path, value: str, differs: bool) -> None:
    # GIVEN the Lingjun block (NCCL_SOCKET_IFNAME=eth in the profile) with NCCL_SOCKET_IFNAME=<value>
    env = (FIXTURES / "pai_lingjun.env").read_text() + f"NCCL_SOCKET_IFNAME={value}\n"
    # WHEN lint-env checks it against the pai-lingjun profile on a Lingjun node
    _, found = _lint_json(env, lingjun_node(tmp_path / "sys"), "--profile", "pai-lingjun")
    # THEN a value the profile's prefix covers is not a deviation, one it does not cover is
    deviation = [p for p in _by_flag(found, "profile") if p["title"].startswith("NCCL_SOCKET_IFNAME=")]
    assert bool(deviation) == differs, found


@pytest.mark.parametrize("value,differs", [
    ("mlx5", False), ("=mlx5_0,mlx5_1,mlx5_2,mlx5_3", False), ("mlx5_0", True), ("^mlx5_0", True),
])
def test_ib_hca_against_the_profile_prefix(tmp_path: Path, value: str, differs: bool) -> None:
    # GIVEN the Lingjun block (NCCL_IB_HCA=mlx5 in the profile) on a node with mlx5_0..3
    env = (FIXTURES / "pai_lingjun.env").read_text() + f"NCCL_IB_HCA={value}\n"
    # WHEN lint-env checks it
    _, found = _lint_json(env, lingjun_node(tmp_path / "sys"), "--profile", "pai-lingjun")
    # THEN a value selecting every device the profile selects conforms; one NIC of four does not
    deviation = [p for p in _by_flag(found, "profile") if p["title"].startswith("NCCL_IB_HCA=")]
    assert bool(deviation) == differs, found


@pytest.mark.parametrize("value,allowed,names,within", [
    ("eth0", "eth", None, True), ("=eth0", "eth", None, True), ("eth", "=eth0", None, False),
    ("=eth0", "=eth0,eth1", None, True), ("eth", "eth0", None, False), ("eth0", "^docker,lo", None, True),
    ("d", "^docker", None, False), ("^docker", "eth", None, False), ("mlx5_0:1", "mlx5:1", None, True),
    ("mlx5_0", "mlx5:1", None, False), ("e", "eth", ["eth0", "eth1"], True), ("e", "eth", ["eth0", "ens1"], False),
])
def test_selects_within_follows_nccls_list_rules(value: str, allowed: str, names: list[str] | None,
                                                 within: bool) -> None:
    # GIVEN a value and an allowed list, maybe with the node's names  WHEN compared  THEN as NCCL matches them
    assert selects_within(parse_list(value), parse_list(allowed), names) == within
