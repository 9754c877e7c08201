"""Shared test fixtures: where ../shared is, and small trace builders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
HTA_TRACES = SHARED / "traces" / "hta"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def hta_traces() -> Path:
    if not HTA_TRACES.is_dir():
        pytest.skip("../shared/traces/hta is not present (fresh clone without the shared corpus)")
    return HTA_TRACES
