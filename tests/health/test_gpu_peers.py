"""A GPU below its peers (SM clock) is a warning only when it is consistently the lowest, beyond the
spread among the other GPUs (`peer_verdict` in analyzers/health/gpu_health.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.health.gpu_health import analyze_gpu_health

from .conftest import T0_NS, counter_store, gpu_record, write_jsonl


def test_low_sm_clock_is_a_warning_only_when_that_gpu_is_consistently_the_lowest(tmp_path: Path) -> None:
    # GIVEN 4 GPUs sampled 20 times whose clocks wander independently between 1500 and 1980 MHz, GPU 1
    # being 11% under the job median on its median sample by chance of the draw
    rng = np.random.default_rng(11)
    recs = []
    for i in range(20):
        for gpu in range(4):
            clock = float(rng.choice([1500, 1980])) if gpu != 1 else float(rng.choice([1500, 1500, 1980]))
            recs.append(gpu_record("node-a", gpu, T0_NS + i * 10**9, sm_clock_mhz=clock))
    noisy = write_jsonl(tmp_path / "a" / "node-a.gpu.jsonl", recs)
    # WHEN analyzed
    found = [f for f in analyze_gpu_health(Analysis(counter_store([noisy]))) if f.evidence.get("check") == "sm_clock"]
    # THEN any SM-clock finding is an info with its confidence, not a warning
    assert all(f.severity == Severity.INFO and f.confidence is not None for f in found)
    # GIVEN instead GPU 2 locked at 1500 MHz while the others hold 1960-1980
    recs = [gpu_record("node-a", gpu, T0_NS + i * 10**9,
                       sm_clock_mhz=1500 if gpu == 2 else 1960 + 10 * ((i + gpu) % 3)) for i in range(20) for gpu in range(4)]
    locked = write_jsonl(tmp_path / "b" / "node-a.gpu.jsonl", recs)
    found = [f for f in analyze_gpu_health(Analysis(counter_store([locked]))) if f.evidence.get("check") == "sm_clock"]
    # THEN it is a warning naming GPU 2, with a high confidence
    assert [(f.severity, f.evidence["gpu"]) for f in found] == [(Severity.WARNING, 2)]
    assert found[0].confidence is not None and found[0].confidence > 0.99
