"""The traces' collectives as bus-bandwidth measures (transfer time only), against the topology NCCL printed.

Real traces: tests/fixtures/dlrm_kineto (8 ranks, V100, NCCL kernels; PyTorch of 2023 recorded no message sizes),
the real NCCL topology of tests/fixtures/nccl_public (PROVENANCE.md). Detection runs on the synthetic sample
sample_traces/synthetic-gpu-4rank-thermal (4 H100 ranks, a compute straggler, collectives with sizes: exact
ground truth), beside topology lines written in NCCL 2.23's format.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.nccl.config import analyze_nccl_config
from perftracker.analyzers.nccl.rules_busbw import trace_measures
from perftracker.analyzers.thresholds import DECLARED

LARGE_BYTES = DECLARED["nccl.trace_busbw_min_bytes"].value
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view
from perftracker.collectors.loading import LoadOptions, load_path

ROOT = Path(__file__).resolve().parents[2]
DLRM = ROOT / "tests" / "fixtures" / "dlrm_kineto"
THERMAL = ROOT / "sample_traces" / "synthetic-gpu-4rank-thermal"
A100_LOG = ROOT / "tests" / "fixtures" / "nccl_public" / "my_nccl_a100_2proc_trace_all.log"
BUS_FLAGS = {"forced_topology", "p2p_disabled", "asymmetric_paths", "few_channels", "slow_link", "busbw_gap"}


def _topology_log(folder: Path, kind: str, gbs: float) -> None:
    """NCCL 2.23 path lines of a 4-GPU node: every GPU pair over `kind` (NVL or PHB) at `gbs` GB/s."""
    gpus = ["GPU/0-1b000", "GPU/0-2c000", "GPU/0-9d000", "GPU/0-ae000"]
    head = "node0:700:700 [0] NCCL INFO "
    lines = [head + "comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0"]
    for src in gpus:
        items = [f"{d} (0/5000.0/LOC)" if d == src else f"{d} (1/{gbs:.1f}/{kind})" for d in gpus]
        lines.append(head + src + " :" + " ".join(items) + " ")
    (folder / "nccl.log").write_text("\n".join(lines) + "\n")


def _bus_findings(folder: Path) -> list:  # type: ignore[type-arg]
    findings = analyze_nccl_config(Analysis(load_path(folder, LoadOptions())))
    return [f for f in findings if f.evidence.get("flag") in BUS_FLAGS]


def test_real_traces_without_message_sizes_give_no_measure(tmp_path: Path) -> None:
    # GIVEN the real 8-rank DLRM traces (matched NCCL kernels, no message sizes) beside a real NCCL topology log
    run = tmp_path / "run"
    shutil.copytree(DLRM, run)
    shutil.copy(A100_LOG, run / "nccl.log")
    analysis = Analysis(load_path(run, LoadOptions()))
    # WHEN their collectives are measured
    split = analysis.view(collective_split_view)
    # THEN they are matched and split, but with no size there is no bandwidth: no measure, no bandwidth finding
    assert not split.empty and (split["bytes"] <= 0).all()
    assert trace_measures(analysis) == []
    assert not [f for f in analyze_nccl_config(analysis) if f.evidence.get("flag") in BUS_FLAGS]


def test_transfer_time_not_kernel_time_and_the_threshold(tmp_path: Path) -> None:
    # GIVEN 4 H100 ranks whose collectives carry sizes, one rank slow in compute (the others wait in the kernels)
    run = tmp_path / "run"
    shutil.copytree(THERMAL, run)
    analysis = Analysis(load_path(run, LoadOptions()))
    measures = trace_measures(analysis)
    # THEN one measure per bandwidth collective, from large messages only
    assert sorted(m.what.split(" ")[0] for m in measures) == ["all_gather", "all_reduce", "reduce_scatter"]
    assert all(m.size_bytes >= LARGE_BYTES and m.source == "trace" for m in measures)
    # AND its bandwidth is the transfer's: above what the whole kernel time (waiting included) would give
    split = analysis.view(collective_split_view)
    ar = split[(split["collective"].astype(str) == "all_reduce") & (split["bytes"] >= LARGE_BYTES)]
    kernel_busbw = float(np.nanmax(ar["bytes"] / ar.groupby("instance")["dur_ns"].transform("max") * 2 * 3 / 4))
    measured = next(m.busbw_gbs for m in measures if m.what.startswith("all_reduce"))
    assert measured > kernel_busbw
    # WHEN beside a PCIe topology (24 GB/s paths: 19.2 GB/s expected) THEN no warning (7.1 GB/s is above 1/4)
    _topology_log(run, "PHB", 24.0)
    assert _bus_findings(run) == []


def test_trace_collectives_far_below_nvlink_warn(tmp_path: Path) -> None:
    # GIVEN the same traces beside an NVLink topology (every pair at H100's 18 links x 20.6 GB/s)
    run = tmp_path / "run"
    shutil.copytree(THERMAL, run)
    _topology_log(run, "NVL", 370.8)
    # WHEN judged THEN one warning (never critical from traces) names the slowest collective and the gap
    found = _bus_findings(run)
    assert len(found) == 1 and found[0].severity == Severity.WARNING, [f.title for f in found]
    assert found[0].evidence["measured"].startswith("trace reduce_scatter in process group 0")
    assert found[0].evidence["gap_x"] > 4
