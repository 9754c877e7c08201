"""Efficiency figures on the shared HTA corpus' traces that carry op shapes (../shared/traces/hta; skipped cleanly
without it): GEMM FLOPs equal 2*M*N*K*batch from the raw JSON, MFU per step, no % of peak above 100, and which
devices the table knows (the two it cannot: a trace naming its MI250 GCD "AMD Radeon Graphics", and one without
deviceProperties)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import HTA_TRACES, corpus_store

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.instances import op_instances_view
from perftracker.analyzers.efficiency.tables import device_peaks_view, op_efficiency_view, step_mfu_view
from tests.analyzers.efficiency.test_efficiency_real import expected_gemm_flops

# set -> the device the table must name ('' where the trace gives no name the table can know)
SETS = {
    "trace_diff/control": "A100 SXM 40GB",
    "trace_diff/test": "V100 SXM2",
    "negative_queue_length_values_check": "A100 SXM 80GB",
    "trace_filter": "",  # no deviceProperties in the sampled traces
    "amd_trace": "",  # 'AMD Radeon Graphics': ROCm 6.2's name for an MI250 GCD, shared with other AMD GPUs
}


@pytest.mark.parametrize("name", sorted(SETS))
def test_hta_traces_with_shapes(name: str, hta_traces: Path) -> None:
    # GIVEN one set of the corpus with record_shapes, analyzed once
    run = Analysis(corpus_store(HTA_TRACES / name))
    inst = run.view(op_instances_view)
    gemms = inst[inst["family"] == "gemm"]
    # THEN each GEMM instance's FLOPs are 2*M*N*K*batch as computed from the raw JSON
    expected: dict[tuple[int, str, int], float] = {}
    for path in sorted((HTA_TRACES / name).glob("*.json*")):
        doc = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
        rank = int(doc.get("distributedInfo", {}).get("rank", 0))
        for e in doc["traceEvents"]:
            if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {}):
                flops = expected_gemm_flops(e["name"], e["args"]["Input Dims"])
                if flops is not None:
                    expected[(rank, e["name"], round(e["ts"] * 1000))] = flops
    assert len(gemms) > 0
    for rank, op, start, flops in zip(gemms["rank"], gemms["op"], gemms["start_ns"], gemms["flops"]):
        assert flops == expected[(int(rank), op, int(start))]
    # AND MFU is computed per step, every percentage of peak is at most 100, and the device is the expected one
    mfu = run.view(step_mfu_view)
    peaks = run.view(device_peaks_view)
    assert len(mfu) >= 1 and (mfu["model_flops"] > 0).any()  # (a step cut short by the profiler may hold no op)
    assert run.view(op_efficiency_view)["pct_of_peak"].dropna().le(100).all()
    assert sorted(set(peaks["device"])) == [SETS[name]]
    if SETS[name]:
        assert ((mfu["mfu"] >= 0) & (mfu["mfu"] <= 1)).all() and (mfu["mfu"] > 0).any()
    else:
        assert mfu["mfu"].isna().all()  # no peak, no MFU: never a guess
