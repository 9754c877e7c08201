"""The throughput a job's log reports (Megatron, torchtitan, NeMo lines), read and judged against the device. The
lines follow the trainers' log formats (Megatron-LM training.py's `throughput per GPU (TFLOP/s/GPU): {:.1f} |`,
torchtitan's coloured `step: .. tflops: .. mfu: ..%`, Primus' `X/Y` variant): synthetic inputs with exact answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.analyzer import analyze_efficiency
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.formats.framework_throughput import parse_line
from tests.analyzers.efficiency.test_efficiency_findings import Ops, mm

MEGATRON = (" [2024-09-03 15:56:55] iteration       20/  500000 | consumed samples:        20480 | elapsed time per "
            "iteration (ms): 12137.8 | throughput per GPU (TFLOP/s/GPU): 412.5 | learning rate: 6.976744E-07 | "
            "global batch size:  1024 | lm loss: 1.064275E+01 | loss scale: 262144.0 |")
PRIMUS = ("\x1b[32m20251202 06:56:28\x1b[0m][\x1b[36mrank-7/8\x1b[0m] iteration 4408/ 5000 | throughput per GPU "
          "(TFLOP/s/GPU): 579.4/573.6 | tokens per GPU (tokens/s/GPU): 10005.5/9903.7 |")
TITAN = ("[rank0]:\x1b[31mstep: 10  \x1b[32mloss:  7.1234  \x1b[33mmemory: 30.12GiB(38.12%)  \x1b[34mtps: 5,123  "
         "\x1b[36mtflops: 1,234.56  \x1b[35mmfu: 395.70%\x1b[39m")


@pytest.mark.parametrize(("line", "expected"), [
    (MEGATRON, {"rank": -1, "step": 20, "tflops": 412.5, "source": "megatron"}),
    (PRIMUS, {"rank": 7, "step": 4408, "tflops": 579.4, "source": "megatron"}),
    (TITAN, {"rank": 0, "step": 10, "tflops": 1234.56, "mfu_pct": 395.7, "source": "torchtitan"}),
    ("[NeMo I] global_step: 50 | TFLOPS_per_GPU: 480.25", {"step": 50, "tflops": 480.25, "source": "nemo"}),
])
def test_trainer_lines_are_read(line: str, expected: dict[str, object]) -> None:
    # GIVEN a trainer's log line; THEN its figures are read exactly
    row = parse_line(line)
    assert row is not None and {k: row[k] for k in expected} == expected
    assert parse_line("step: 10 loss: 2.0") is None and parse_line("TFLOPs total: 3.4") is None


def _run(tmp_path: Path, log: str) -> dict[str, object]:
    ops = Ops()
    for _ in range(3):
        mm(ops, 4096, 4096, 4096, 250.0)
    ops.save(tmp_path)
    (tmp_path / "train.log").write_text(f"starting\n{log}\n{log}\n")
    analysis = Analysis(load_path(tmp_path, LoadOptions(cache_dir=None)))
    return {f.key: f for f in analyze_efficiency(analysis)}


def test_mfu_that_assumes_another_devices_peak_is_flagged(tmp_path: Path) -> None:
    # GIVEN an H100 trace and a torchtitan log claiming 1,234.56 TFLOP/s at 395.7% MFU (a peak of 312 TFLOPS: an
    # A100's, which this device does not have)
    finding = _run(tmp_path, TITAN)["reported:torchtitan"]
    # THEN a warning says which peak it implies and the device's peaks
    assert finding.severity.label == "warning"  # type: ignore[attr-defined]
    assert "above 100%" in finding.title  # type: ignore[attr-defined]
    evidence = finding.evidence  # type: ignore[attr-defined]
    assert evidence["reported_mfu_pct_median"] == 395.7 and evidence["device"] == "H100 SXM"
    assert json.dumps(evidence)  # plain data


def test_plausible_megatron_figure_is_info_with_both_measures(tmp_path: Path) -> None:
    # GIVEN an H100 trace and a Megatron log at 412.5 TFLOP/s per GPU (42% of the BF16 dense peak)
    finding = _run(tmp_path, MEGATRON)["reported:megatron"]
    # THEN it is said as information, beside perftracker's own measure
    assert finding.severity.label == "info"  # type: ignore[attr-defined]
    assert finding.evidence["reported_tflops_per_gpu_median"] == 412.5  # type: ignore[attr-defined]
    assert finding.evidence["perftracker_tflops_per_gpu_median"] is not None  # type: ignore[attr-defined]


def test_a_figure_above_every_peak_is_flagged(tmp_path: Path) -> None:
    # GIVEN 2,500 TFLOP/s per GPU on an H100 (its highest dense peak, FP8, is 1,978.9)
    line = MEGATRON.replace("412.5", "2500.0")
    finding = _run(tmp_path, line)["reported:megatron"]
    assert finding.severity.label == "warning" and "highest dense peak" in finding.title  # type: ignore[attr-defined]
