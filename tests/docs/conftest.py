"""Fixtures of the documentation tests: the bundled sample runs analyzed once (by `perftracker demo`, the
command a user runs), and a diff of two of them, shared by the schema and generated-pages tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def perftracker(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python -m perftracker ARGS` with this checkout's package, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "perftracker", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="session")
def demo_outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GIVEN the sample runs that ship with perftracker, WHEN `perftracker demo -o DIR` analyzes them, THEN
    DIR/<run>/ holds each run's findings.json and tables/."""
    out = tmp_path_factory.mktemp("demo")
    result = perftracker("demo", "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def diff_output(demo_outputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """diff.json of two real sample runs' saved analyses (a DDP job with a slow rank against a synthetic GPU run)."""
    out = tmp_path_factory.mktemp("diff")
    result = perftracker("diff", str(demo_outputs / "ddp-gloo-4rank-slow-rank2"),
                         str(demo_outputs / "synthetic-gpu-4rank-thermal"), "-o", str(out), "-q",
                         "--allow-different-jobs")  # two jobs on purpose: the most kinds of change in one diff
    assert result.returncode == 0, result.stderr
    return out / "diff.json"
