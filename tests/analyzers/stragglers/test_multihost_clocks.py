"""Traces of several hosts whose clocks differ: aligned without crashing, offsets recovered per host."""

from __future__ import annotations

from pathlib import Path

from api_helpers import analyzed
from synth import SynthSpec, generate

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.straggler import arrivals_view
from perftracker.collectors.loading import LoadOptions, load_path

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b", 4: "node-c", 5: "node-c"}
SKEW_US = {0: 0.0, 1: 0.0, 2: 1234.5, 3: 1234.501, 4: -7777.25, 5: -7777.249}  # ~one clock per host


def _run(tmp_path: Path, stragglers: dict[int, float]) -> Path:
    run = tmp_path / "run"
    generate(SynthSpec(ranks=6, steps=8, kernels_per_step=8, skew_us=SKEW_US, stragglers=stragglers, seed=3),
             run / "traces", truth_path=tmp_path / "truth.json")
    for rank, host in HOSTS.items():  # the profiler's own file names: <host>_<pid>.<ms>.pt.trace.json
        trace = next((run / "traces").glob(f"rank-{rank}.*"))
        trace.rename(run / "traces" / f"{host}_{100 + rank}.1700000000000.pt.trace.json{trace.suffix}")
    return run


def test_three_hosts_with_skewed_clocks_are_aligned_per_host(tmp_path: Path) -> None:
    # GIVEN 6 ranks on 3 hosts whose clocks differ by 1.2 ms and -7.8 ms (half-microsecond offsets too)
    run = _run(tmp_path, {})
    # WHEN the clocks are aligned
    offsets = Analysis(load_path(run, LoadOptions(workers=1, cache_dir=None))).view(arrivals_view).offsets
    # THEN each host's ranks share one offset, and the hosts' offsets differ by the skew (to 1 us)
    per_host = {h: {int(offsets[r]) for r in HOSTS if HOSTS[r] == h} for h in ("node-a", "node-b", "node-c")}
    assert all(len(v) == 1 for v in per_host.values())
    a, b, c = (per_host[h].pop() for h in ("node-a", "node-b", "node-c"))
    assert abs((b - a) - 1_234_500) < 1_000 and abs((c - a) + 7_777_250) < 1_000


def test_analyze_of_many_hosts_names_the_straggler_without_crashing(tmp_path: Path) -> None:
    # GIVEN the same 3-host job with rank 4 computing 6 ms longer per slot
    run = _run(tmp_path, {4: 6000.0})
    # WHEN analyzed end to end
    findings = analyzed(run, tmp_path / "out", cache=False, workers=1).findings
    # THEN it exits normally and names rank 4 (no analyzer crashed)
    assert not any(f.title.startswith("Analyzer '") for f in findings)
    assert [f.ranks for f in findings if f.analyzer == "straggler" and f.severity.label != "info"] == [(4,)]
