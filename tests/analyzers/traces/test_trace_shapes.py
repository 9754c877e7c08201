"""Every trace shape gets advice that matches what it holds: execution traces beside Kineto traces, kernel
launches without kernel events (CUPTI range profiling, lost activity records), CPU-only profiles."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import corpus_store
from tracegen import TraceBuilder

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.passes import costed_findings
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store


def _inputs(store: Store) -> dict[str, Finding]:
    return {f.key: f for f in costed_findings(Analysis(store), only=["inputs"])}


def test_an_execution_trace_is_joined_to_its_kineto_trace(hta_traces: Path) -> None:
    # GIVEN HTA's simple-add benchmark: a Kineto trace and the execution trace recorded with it
    store = corpus_store(hta_traces / "execution_trace")
    # WHEN the inputs and idle analyzers run
    findings = {f.key: f for f in costed_findings(Analysis(store), only=["inputs", "idle"])}
    # THEN the ET's operators are joined to rank 0 by record-function id, and the CPU ops named in the
    # idle finding carry the input shapes the ET recorded
    joined = findings["inputs:execution-trace:benchmark_simple_add_et.json.gz"]
    assert joined.evidence == {"file": str(hta_traces / "execution_trace" / "benchmark_simple_add_et.json.gz"),
                               "operators": 36, "matched": 36, "rank": 0}
    assert "joined to rank 0's trace" in joined.title
    ops = {op["op"]: op for op in findings["idle:sync"].evidence["cpu_ops_during_gaps"]}
    assert ops["aten::mul"]["input_shapes"] == "[[10485760],[]]"
    assert ops["aten::add"]["input_shapes"] == "[[256,256],[256,256],[]]"


def test_an_execution_trace_of_another_process_is_said_not_to_be_used(tmp_path: Path) -> None:
    # GIVEN a Kineto trace and an execution trace whose record-function ids match none of its ops
    TraceBuilder(rank=0).step(1, 0, 100).cpu("aten::mm", 10, 20, **{"External id": 7}).kernel(
        "gemm", 15, 10).write(tmp_path / "run" / "rank-0.json")
    et = {"schema": "1.0.1", "pid": 4242, "nodes": [
        {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "rf_id": 0},
        {"id": 5, "name": "aten::mm", "rf_id": 900, "input_shapes": [[64, 64], [64, 64]], "input_types": []}]}
    (tmp_path / "run" / "rank-0_et.json").write_text(json.dumps(et))
    (tmp_path / "run" / "broken_et.json").write_text("{not json")
    store = load_path(tmp_path / "run", LoadOptions(workers=1))
    # WHEN the inputs analyzer runs
    findings = _inputs(store)
    # THEN the ET is recognized, said not to be used and why; the broken one is an unusable input
    unused = findings["inputs:execution-trace:rank-0_et.json"]
    assert "is not used: none of its 1 operators matches" in unused.title
    assert "ExecutionTraceObserver" in unused.recommendation
    assert "broken_et.json" in json.dumps(findings["inputs:errors"].evidence)


def test_kernel_launches_with_cupti_counter_ranges_blame_range_profiling(hta_traces: Path) -> None:
    # GIVEN HTA's CUPTI profiler benchmark: CUDA launches and counter ranges, no kernel events
    store = corpus_store(hta_traces / "cupti_profiler")
    # WHEN the inputs analyzer runs
    [finding] = [f for k, f in _inputs(store).items() if k.startswith("inputs:no-kernels")]
    # THEN it names the profiler setting, not a missing ProfilerActivity.CUDA
    assert finding.key == "inputs:no-kernels-range-profiling"
    assert finding.severity == Severity.WARNING
    assert finding.evidence == {"kernel_launches": 77, "counter_ranges": 77, "runtime_calls": 1862}
    assert "CUPTI range profiling" in finding.title and "profiler_metrics" in finding.recommendation
    assert "add ProfilerActivity.CUDA" not in finding.recommendation


def test_kernel_launches_without_kernel_events_or_ranges_say_records_went_missing(tmp_path: Path) -> None:
    # GIVEN a trace with two cudaLaunchKernel calls and no GPU events at all
    b = TraceBuilder(rank=0).step(1, 0, 100)
    b.cpu("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=1)
    b.cpu("cudaLaunchKernel", 20, 5, cat="cuda_runtime", correlation=2)
    b.write(tmp_path / "t" / "rank-0.json")
    findings = _inputs(load_path(tmp_path / "t", LoadOptions(workers=1)))
    # THEN the finding says the activity records never arrived, with what to check
    finding = findings["inputs:no-kernels"]
    assert finding.evidence == {"kernel_launches": 2, "runtime_calls": 2}
    assert "torch.cuda.synchronize()" in finding.recommendation
    assert "inputs:cpu-only" not in findings


def test_a_cpu_only_profile_still_asks_for_the_cuda_activity(tmp_path: Path) -> None:
    TraceBuilder(rank=0).step(1, 0, 100).cpu("aten::mm", 10, 20).write(tmp_path / "t" / "rank-0.json")
    finding = _inputs(load_path(tmp_path / "t", LoadOptions(workers=1)))["inputs:cpu-only"]
    assert "add ProfilerActivity.CUDA" in finding.recommendation
