"""The Ray engine on a real local Ray cluster gives the local engine's results, so the same findings.

Promise checked (collectors/engines/ray_engine.py): `analyze --engine ray --ray-address ADDR` (a separate
driver joining the cluster, as on a real cluster) writes the findings.json the local engine writes;
the tables come back as the Parquet the tasks cached where the driver sees the cache folder, and as
frames through Ray's object store where it does not (no cache); each finished task is reported; the
cache is shared with the local engine (a Ray run after a local one parses nothing). One Ray cluster
(2 CPUs, no dashboard, its temp dir under /tmp) serves the whole module and is shut down after it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from api_helpers import analyzed
from synth import SynthSpec, generate

from perftracker.collectors.engines import LocalEngine, MapArgs
from perftracker.collectors.engines.ray_engine import RayEngine, map_task

ray = pytest.importorskip("ray", reason="the Ray extra is not installed (pip install -e '.[dev]' installs it)")

RANKS = 4
STRAGGLER = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster for this module: its GCS address (other drivers join it there)."""
    temp = tempfile.mkdtemp(prefix="pt-ray-")  # short: Ray's socket paths must fit 107 characters
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GIVEN 4 synthetic ranks, rank 2 a compute straggler."""
    root = tmp_path_factory.mktemp("ray-traces")
    generate(SynthSpec(ranks=RANKS, steps=5, kernels_per_step=12, collectives_per_step=4, seed=5,
                       stragglers={STRAGGLER: 3000.0}), root / "traces", truth_path=root / "ground_truth.json")
    return root / "traces"


def _comparable(findings_json: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(findings_json.read_text(encoding="utf-8"))
    doc.pop("generated_at", None)
    doc.pop("input", None)
    return doc


def _paths(folder: Path) -> list[str]:
    return [str(p) for p in sorted(folder.glob("rank-*"))]


def test_analyze_with_the_ray_engine_writes_the_local_engines_findings(cluster: str, traces: Path,
                                                                       tmp_path: Path) -> None:
    # GIVEN the findings of the local engine
    local = analyzed(traces, tmp_path / "local", cache=False, workers=1)
    assert any(f.analyzer == "straggler" and tuple(f.ranks) == (STRAGGLER,) for f in local.findings)
    # WHEN `analyze --engine ray` joins the cluster from another process (its cache in a fresh folder)
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(traces), "-o", str(tmp_path / "ray"),
                           "--engine", "ray", "--ray-address", cluster, "--quiet"], capture_output=True, text=True,
                          env=env, timeout=180)
    # THEN it exits 0 with the same findings.json, and the tasks left each rank's tables in the cache
    assert done.returncode == 0, done.stderr[-3000:]
    assert _comparable(tmp_path / "ray" / "findings.json") == _comparable(tmp_path / "local" / "findings.json")
    assert len(list((tmp_path / "xdg" / "perftracker").glob("*.meta.json"))) == RANKS
    assert not list((tmp_path / "xdg" / "perftracker").glob(".engine-probe-*"))


def test_tables_travel_as_cached_parquet_or_through_the_object_store(cluster: str, traces: Path,
                                                                     tmp_path: Path) -> None:
    local = LocalEngine(workers=1).map(_paths(traces), MapArgs(), lambda done, total: None)
    seen: list[tuple[int, int]] = []
    # WHEN mapped on Ray without a cache THEN the frames come back in the results, equal to the local ones,
    # and each finished task was reported
    direct = RayEngine().map(_paths(traces), MapArgs(), lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, RANKS) and seen[-1] == (RANKS, RANKS) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert [r.path for r in direct] == _paths(traces)
    for a, b in zip(local, direct):
        assert b.events is not None and a.events is not None and a.facts == b.facts
        pd.testing.assert_frame_equal(a.events, b.events)
    # WHEN mapped with a cache folder the driver sees THEN only the facts come back (tables in the Parquet)
    cached = RayEngine().map(_paths(traces), MapArgs(cache_dir=tmp_path / "cache"), lambda done, total: None)
    assert all(r.events is None and r.cache_stem and not r.cached for r in cached)
    # AND the local engine, run next on that cache, parses nothing
    again = LocalEngine(workers=1).map(_paths(traces), MapArgs(cache_dir=tmp_path / "cache"), lambda d, t: None)
    assert all(r.cached for r in again)


def test_a_task_that_cannot_see_the_drivers_cache_sends_its_tables(traces: Path, tmp_path: Path) -> None:
    # GIVEN a task whose node does not see the driver's probe file (a node-local cache folder)
    path = _paths(traces)[0]
    version, result = map_task(path, MapArgs(cache_dir=tmp_path / "node-cache"), str(tmp_path / "absent-probe"))
    # THEN it caches on its node and still returns the tables themselves
    assert result.ok and result.events is not None and result.cache_stem
    # AND a trace missing on a node is a note naming the file and the shared storage it needs
    _, missing = map_task(str(tmp_path / "rank-9.json"), MapArgs(), "")
    assert not missing.ok and "rank-9.json: not found on Ray node" in missing.error
    assert "storage every node sees" in missing.error
