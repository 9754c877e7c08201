"""On the shared real traces (NVIDIA, AMD, Triton, a 2-rank job) the report names the top kernels and CPU ops,
and the idle finding names what the CPU was doing; one analysis per trace, shared by the tests."""

from __future__ import annotations

import html
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
from api_helpers import analyzed as analyzed_into

from perftracker.results import Run

# trace set -> (its top kernel across ranks, that kernel's family, the op that launched it, an op of its top ops)
EXPECTED = {
    "nccl_parser_config": ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                           "communication", "nccl:all_reduce", "aten::cudnn_convolution"),
    "amd_trace": ("Memcpy HtoD (Host -> Device)", "memory", "aten::copy_", "hipLaunchKernel"),
    "triton_example": ("triton_poi_fused_add_cos_sin_0", "elementwise", "triton_poi_fused_add_cos_sin_0",
                       "Torch-Compiled Region: 0/0"),
    "trace_filter": ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
                     "communication", "nccl:all_to_all", "aten::mm"),
}


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path, str], Run]:
    @cache
    def run(root: Path, trace_set: str) -> Run:
        return analyzed_into(root / trace_set, tmp_path_factory.mktemp(trace_set), cache=False, workers=1)

    return run


@pytest.mark.parametrize("trace_set", sorted(EXPECTED))
def test_the_report_names_the_top_kernels_and_ops(hta_traces: Path, analyzed: Callable[[Path, str], Run],
                                                  trace_set: str) -> None:
    # GIVEN a real trace (CUDA, ROCm, Triton, two ranks) WHEN analyzed
    result = analyzed(hta_traces, trace_set)
    kernel, family, launcher, op = EXPECTED[trace_set]
    kernels = pd.read_parquet(result.out_dir / "tables" / "kernels.parquet")
    ops = pd.read_parquet(result.out_dir / "tables" / "ops.parquet")
    # THEN the top kernel by total time is the one known for the trace, in its family, with its launching op
    assert (kernels["name"].iloc[0], kernels["family"].iloc[0], kernels["launched_by"].iloc[0]) == (
        kernel, family, launcher)
    assert op in set(ops["name"])
    # AND the report's "Kernels and ops" section names it in full (title) and the op in its table
    page = result.report_path.read_text(encoding="utf-8")
    section = page[page.index('<section id="kernels">'):]
    section = section[:section.index("</section>")]
    assert f'title="{html.escape(kernel)}"' in section
    assert html.escape(op) in section


def test_a_multi_rank_job_has_tables_per_rank_and_across_ranks(hta_traces: Path,
                                                              analyzed: Callable[[Path, str], Run]) -> None:
    # GIVEN the real 2-rank job WHEN analyzed
    result = analyzed(hta_traces, "trace_filter")
    tables = result.out_dir / "tables"
    per_rank = pd.read_parquet(tables / "kernels_per_rank.parquet")
    across = pd.read_parquet(tables / "kernels.parquet").set_index("name")
    # THEN each rank has its own top kernels, and across ranks a kernel both ran adds up their counts
    assert sorted(per_rank["rank"].unique()) == [0, 1]
    top = across.index[0]
    assert across.loc[top, "ranks"] == 2
    assert across.loc[top, "count"] == per_rank[per_rank["name"] == top]["count"].sum()
    # AND the families of each rank add up to 100% of its GPU work
    families = pd.read_parquet(tables / "kernel_families.parquet")
    assert families.groupby("rank")["share_pct"].sum().tolist() == pytest.approx([100.0, 100.0])
    # AND the report has a table per rank
    page = result.report_path.read_text(encoding="utf-8")
    assert "Rank 0: top kernels and ops" in page and "Rank 1: top kernels and ops" in page


def test_the_idle_finding_says_what_the_cpu_did_in_the_longest_gaps(
        hta_traces: Path, analyzed: Callable[[Path, str], Run]) -> None:
    # GIVEN the real 2-rank job whose GPU waits ~171 ms per step for the CPU
    result = analyzed(hta_traces, "trace_filter")
    host = next(f for f in result.findings if f.key == "idle:host")
    # THEN the finding names the CPU op behind most of that time, and each longest gap its ops, the
    # kernel after it and the op that launched that kernel
    assert "the CPU meanwhile was inside ## backward ##" in host.title
    assert host.evidence["cpu_ops_while_idle"][0]["op"] == "## backward ##"
    gap = host.evidence["longest_gaps"][0]
    assert gap["cpu_ops"].startswith("Optimizer.step#Shampoo.step")
    assert gap["next_kernel"].startswith("void fbgemm_gpu::") and gap["launched_by"] == "fbgemm::FP8RowwiseQuantizedToFloat"
