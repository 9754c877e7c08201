"""Shared test fixtures: where ../shared is, and small trace builders."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
HTA_TRACES = SHARED / "traces" / "hta"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def hta_traces() -> Path:
    if not HTA_TRACES.is_dir():
        pytest.skip("../shared/traces/hta is not present (fresh clone without the shared corpus)")
    return HTA_TRACES


@functools.cache
def corpus_store(path: Path) -> Store:
    """The Store of one folder of the shared corpus or of sample_traces/, loaded once per test session.

    For tests that only read it (analyses do not change a Store): the corpus' traces are the slowest
    inputs to parse, and several test modules analyze the same ones.
    """
    return load_path(path, LoadOptions(workers=1))
