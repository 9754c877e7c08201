"""`perftracker lint-env` end to end: crafted env files, the pai-lingjun profile, fake sysfs, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from perftracker.cli import lint_env
from perftracker.cli.voice import add_command

from .conftest import FIXTURES, lingjun_node

app = typer.Typer()
add_command(app, "lint-env", lint_env.lint_env)


@app.callback()
def _root() -> None:
    """Test app."""


def _lint(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["lint-env", *args])
    return result.exit_code, result.output


def test_lingjun_block_on_matching_node_exits_clean(tmp_path: Path) -> None:
    root = lingjun_node(tmp_path / "sys")
    code, out = _lint("--env-file", str(FIXTURES / "pai_lingjun.env"), "--profile", "pai-lingjun",
                      "--sysfs-root", str(root), "--json", "--fail-on", "warning")
    assert code == 0 and json.loads(out) == []


# One crafted line per misconfiguration of the issue, on top of the Lingjun block.
CASES = [
    ("NCCL_IB_HCA=mlx5_9", "hca_problem"),
    ("NCCL_IB_HCA=mlx5_0, mlx5_1", "hca_problem"),
    ("NCCL_IB_HCA==^mlx5_0", "hca_problem"),
    ("NCCL_IB_GID_INDEX=0", "gid_problem"),
    ("NCCL_IB_GID_INDEX=2", "gid_problem"),
    ("NCCL_IB_GID_INDEX=6", "gid_problem"),
    ("NCCL_IB_TC=300", "ib_tc"),
    ("NCCL_IB_TC=34", "ib_tc"),
    ("NCCL_IB_TC=96", "profile"),
    ("NCCL_IB_SL=16", "ib_sl"),
    ("NCCL_IB_TIMEOUT=0", "ib_timeout"),
    ("NCCL_IB_TIMEOUT=32", "ib_timeout"),
    ("NCCL_IB_TIMEOUT=18", "ib_timeout"),
    ("NCCL_IB_TIMEOUT=26", "ib_timeout"),
    ("NCCL_IB_RETRY_CNT=13", "ib_retry"),
    ("NCCL_IB_QPS_PER_CONNECTION=4", "ib_qps"),
    ("NCCL_SOCKET_IFNAME=docker0", "bad_socket_iface"),
    ("NCCL_SOCKET_IFNAME=ens", "bad_socket_iface"),
    ("NCCL_SOCKET_IFNAME=^eth", "bad_socket_iface"),
    ("NCCL_IB_DISABLE=1", "socket_fallback"),
    ("NCCL_ALGO=Tree", "forced_tuning"),
    ("NCCL_PROTO=LL128", "forced_tuning"),
    ("NCCL_DEBUG=TRACE", "debug"),
    ("NCCL_DEBUG_SUBSYS=ALL", "debug"),
    ("NCCL_IB_TC=0136", "loose_int"),
    ("NCCL_IB_SL=5abc", "loose_int"),
    ("NCCL_P2P_DISABLE=1", "p2p_disabled"),
]


@pytest.mark.parametrize("line,flag", CASES)
def test_crafted_env_file_is_caught(tmp_path: Path, line: str, flag: str) -> None:
    # GIVEN the Lingjun block with one bad line appended, on a matching node
    env_file = tmp_path / "job.env"
    env_file.write_text((FIXTURES / "pai_lingjun.env").read_text() + line + "\n")
    root = lingjun_node(tmp_path / "sys")
    # WHEN lint-env checks it
    code, out = _lint("--env-file", str(env_file), "--profile", "pai-lingjun", "--sysfs-root", str(root),
                      "--json", "--fail-on", "warning")
    # THEN the misconfiguration is reported and the exit code says so
    found = json.loads(out)
    assert flag in {p["flag"] for f in found for p in [f["evidence"], *f["evidence"].get("problems", [])]}, out
    assert code == 3


def test_exit_codes_and_text_output(tmp_path: Path) -> None:
    env_file = tmp_path / "job.env"
    env_file.write_text("NCCL_ALGO=Ring\n")
    code, out = _lint("--env-file", str(env_file), "--sysfs-root", str(tmp_path))
    assert code == 0 and "NCCL_ALGO" in out  # a warning is below the default critical threshold
    code, _ = _lint("--env-file", str(env_file), "--sysfs-root", str(tmp_path), "--fail-on", "warning")
    assert code == 3
    env_file.write_text("NCCL_IB_TIMEOUT=0\n")
    assert _lint("--env-file", str(env_file), "--sysfs-root", str(tmp_path))[0] == 3


def test_input_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    code, out = _lint("--env-file", str(tmp_path / "missing.env"))
    assert code == 2 and "cannot read env file" in out and "Traceback" not in out
    code, out = _lint("--profile", "no-such-profile", "--sysfs-root", str(tmp_path))
    assert code == 2 and "unknown profile" in out
    code, out = _lint("--fail-on", "sometimes", "--sysfs-root", str(tmp_path))
    assert code == 2


def test_user_profile_file(tmp_path: Path) -> None:
    profile = tmp_path / "mine.json"
    profile.write_text(json.dumps({"name": "mine", "values": {"NCCL_IB_TIMEOUT": {"value": "23"}}}))
    env_file = tmp_path / "job.env"
    env_file.write_text("NCCL_IB_TIMEOUT=20\n")
    _, out = _lint("--env-file", str(env_file), "--profile", str(profile), "--sysfs-root", str(tmp_path),
                      "--json")
    assert any("below the mine profile's 23" in f["title"] for f in json.loads(out))
