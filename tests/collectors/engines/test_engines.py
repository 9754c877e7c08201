"""Choosing the map step's engine: a clear exit 2 for what cannot work, before any trace is parsed.

Promise checked (cli/options.checked_engine, collectors/engines/ray_engine): `--engine ray` without the
Ray extra, with an address nothing answers at, or with one that is not an address, and an engine that does
not exist, each stop `analyze` with exit 2 and one line saying what, where and what to do; the
unreachable address within seconds (Ray's own retries take minutes).
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.collectors.engines.ray_engine import check_reachable
from perftracker.errors import UsageError

SAMPLE = Path(__file__).resolve().parents[3] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


def _analyze(tmp_path: Path, *options: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["analyze", str(SAMPLE), "-o", str(tmp_path / "out"), "--no-cache", *options])
    return result.exit_code, result.output


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_ray_engine_without_the_ray_extra_says_how_to_install_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an environment where `import ray` fails WHEN analyze is asked for the Ray engine
    monkeypatch.setitem(sys.modules, "ray", None)
    code, output = _analyze(tmp_path, "--engine", "ray")
    # THEN exit 2, naming the option and the extra to install, and nothing was written
    assert code == 2, output
    assert "--engine ray: the Ray engine needs the ray package" in output and "perftracker-dl[ray]" in output
    assert not (tmp_path / "out" / "findings.json").exists()


def test_an_address_nothing_answers_at_is_an_exit_2_within_seconds(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    # GIVEN a port nobody listens on WHEN analyze joins it as the Ray cluster
    started = time.monotonic()
    code, output = _analyze(tmp_path, "--engine", "ray", "--ray-address", f"127.0.0.1:{_closed_port()}")
    # THEN exit 2 at once, saying where and what to check
    assert code == 2, output
    assert "no Ray cluster answers there" in output and "ray start --head" in output
    assert time.monotonic() - started < 30


def test_what_is_not_an_address_or_an_engine_is_said_so() -> None:
    # GIVEN an address without a port, and an engine that does not exist THEN each is a usage error
    with pytest.raises(UsageError, match="is not a Ray cluster address"):
        check_reachable("head-node")
    with pytest.raises(UsageError, match="is not a Ray cluster address"):
        check_reachable("ray://head:port")


def test_an_unknown_engine_is_an_exit_2(tmp_path: Path) -> None:
    code, output = _analyze(tmp_path, "--engine", "spark")
    assert code == 2 and "--engine: no engine called 'spark'" in output and "local, ray" in output
