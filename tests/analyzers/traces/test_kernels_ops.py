"""Kernels and ops on traces with exactly known timings: the top tables, the CPU call trees, kernel families,
what the CPU did while the GPU waited, and the straggler's slower ops."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.op_work import slower_ops
from perftracker.analyzers.traces.cpu_ops import cpu_calls
from perftracker.analyzers.traces.idle import analyze_idle
from perftracker.analyzers.traces.kernels import (
    family_of,
    kernel_families_view,
    kernels_per_rank_view,
    kernels_view,
    ops_per_rank_view,
    ops_view,
)
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.store import Store
from perftracker.values import short_symbol


def _load(tmp_path: Path, *builders: TraceBuilder) -> Store:
    for i, b in enumerate(builders):
        b.write(tmp_path / "t" / f"rank-{i}.json")
    return load_path(tmp_path / "t", LoadOptions(workers=1, cache_dir=None))


def _training_rank(rank: int, gemm_us: float) -> TraceBuilder:
    """Two 1000 us steps: aten::linear > aten::addmm > cudaLaunchKernel queues a gemm; aten::add_ queues two adds."""
    b = TraceBuilder(rank=rank, world_size=2)
    for n, t0 in ((1, 0), (2, 1000)):
        b.step(n, t0, 1000)
        b.cpu("aten::linear", t0 + 10, 40).cpu("aten::addmm", t0 + 15, 30)
        b.kernel("ampere_sgemm_128x64_nn", t0 + 100, gemm_us, launch_ts=t0 + 20)
        b.cpu("aten::add_", t0 + 60, 20)
        b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)",
                 t0 + 400, 10, launch_ts=t0 + 62)
        b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)",
                 t0 + 420, 30, launch_ts=t0 + 70)
    b.kernel("ampere_sgemm_128x64_nn", 2500, gemm_us, launch_ts=2490)  # after the steps: window only
    return b


ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"


def test_top_kernels_per_rank_and_across_ranks(tmp_path: Path) -> None:
    # GIVEN two ranks whose gemm takes 200 and 300 us, each with two adds of 10 and 30 us per step
    analysis = Analysis(_load(tmp_path, _training_rank(0, 200), _training_rank(1, 300)))
    # WHEN the kernel tables are computed
    per_rank = kernels_per_rank_view(analysis).set_index(["rank", "name"])
    across = kernels_view(analysis).set_index("name")
    # THEN each kernel has its family, launching op, count, total, mean, p90 and per-step numbers
    gemm = per_rank.loc[(0, "ampere_sgemm_128x64_nn")]
    assert (gemm["family"], gemm["launched_by"], gemm["count"], gemm["total_ns"]) == ("GEMM", "aten::addmm", 3, 600_000)
    assert gemm["steps"] == 2 and gemm["count_per_step"] == 1 and gemm["ns_per_step"] == 200_000
    add = per_rank.loc[(0, ADD)]
    assert (add["family"], add["launched_by"], add["count"], add["mean_ns"]) == ("elementwise", "aten::add_", 4, 20_000)
    assert add["p90_ns"] == pytest.approx(30_000)  # pandas' linear p90 of [10, 10, 30, 30]
    # AND the shares of one rank's GPU work add up to 100%: gemm 600 of 680 us
    assert per_rank.loc[0, "share_pct"].sum() == pytest.approx(100.0)
    assert gemm["share_pct"] == pytest.approx(100 * 600 / 680)
    # AND across ranks the counts add up, per step is the mean over rank-steps, ranks counts who ran it
    assert across.loc["ampere_sgemm_128x64_nn", "count"] == 6 and across.loc["ampere_sgemm_128x64_nn", "ranks"] == 2
    assert across.loc["ampere_sgemm_128x64_nn", "ns_per_step"] == pytest.approx((400_000 + 600_000) / 4)
    assert list(across.index[:1]) == ["ampere_sgemm_128x64_nn"]  # ordered by total time
    # AND the family table per rank adds up to 100% too
    families = kernel_families_view(analysis)
    assert families.groupby("rank")["share_pct"].sum().tolist() == pytest.approx([100.0, 100.0])


def test_a_kernel_is_launched_by_the_op_behind_most_of_its_time(tmp_path: Path) -> None:
    # GIVEN a kernel launched twice by op_a (10 us each) and twice by op_b (100 us each): a tie in count
    b = TraceBuilder(rank=0).step(1, 0, 2000)
    for i, (op, dur) in enumerate((("op_a", 10), ("op_b", 100), ("op_a", 10), ("op_b", 100))):
        b.cpu(op, 100 * i, 10).kernel("k", 500 + 200 * i, dur, launch_ts=100 * i + 2)
    # WHEN the kernel table is computed; THEN its launching op is the one behind most of its time
    assert kernels_view(Analysis(_load(tmp_path, b))).set_index("name").loc["k", "launched_by"] == "op_b"


def test_top_cpu_ops_have_total_and_self_time(tmp_path: Path) -> None:
    # GIVEN aten::linear (40 us) > aten::addmm (30 us) > cudaLaunchKernel (3 us), twice per rank
    analysis = Analysis(_load(tmp_path, _training_rank(0, 200), _training_rank(1, 300)))
    # WHEN the op tables are computed
    ops = ops_per_rank_view(analysis).set_index(["rank", "name"])
    # THEN total includes the children and self does not
    linear, addmm = ops.loc[(0, "aten::linear")], ops.loc[(0, "aten::addmm")]
    assert (linear["total_ns"], linear["self_ns"]) == (80_000, 20_000)
    assert (addmm["total_ns"], addmm["self_ns"]) == (60_000, 54_000)
    assert addmm["kind"] == "cpu_op" and ops.loc[(0, "cudaLaunchKernel"), "kind"] == "runtime"
    assert addmm["count_per_step"] == 1 and addmm["ns_per_step"] == 30_000
    # AND self shares add up to 100% per rank; ProfilerStep is not an op
    assert ops.loc[0, "share_pct"].sum() == pytest.approx(100.0)
    assert not any(str(n).startswith("ProfilerStep#") for n in ops_view(analysis)["name"])


def test_call_trees_give_parents_self_time_and_the_launching_op(tmp_path: Path) -> None:
    # GIVEN nested ops on one thread, an op that only partly overlaps the one before it, and an instant
    b = (TraceBuilder(rank=0).cpu("outer", 0, 100).cpu("inner", 10, 50).cpu("cudaLaunchKernel", 20, 5,
                                                                             cat="cuda_runtime")
         .cpu("overlapping", 90, 30).cpu("instant", 95, 0))
    calls = cpu_calls(_load(tmp_path, b)).set_index("name")
    # THEN each call knows its parent, its self time, and (for a runtime call) the op it runs in
    names = list(cpu_calls(_load(tmp_path, b))["name"].astype(str))
    assert calls.loc["inner", "parent"] == names.index("outer")
    assert calls.loc["cudaLaunchKernel", "parent"] == names.index("inner")
    assert calls.loc["cudaLaunchKernel", "op"] == names.index("inner")
    assert calls.loc["overlapping", "parent"] == -1  # starts inside outer, ends after it: not its child
    assert calls.loc["instant", "parent"] == names.index("overlapping")
    assert (calls.loc["outer", "self_ns"], calls.loc["inner", "self_ns"]) == (50_000, 45_000)


@pytest.mark.parametrize(("name", "klass", "family"), [
    # from the shared HTA traces (PROVENANCE.md there): AMD Tensile, CUTLASS, cuBLAS, cuDNN, ATen, Triton
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1", "compute", "GEMM"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm"
     "_256x64_16x4_nn_align4::Params)", "compute", "GEMM"),
    ("volta_sgemm_128x32_nt", "compute", "GEMM"),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16", "compute",
     "convolution"),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock", "compute",
     "convolution"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()", "compute", "reduction"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct)", "compute",
     "reduction"),
    ("triton_poi_fused_add_cos_sin_0", "compute", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int)", "compute", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<2> >", "compute", "elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)", "compute", "memory"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>", "compute",
     "memory"),
    ("Memcpy HtoD (Pinned -> Device)", "memory", "memory"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "comm", "communication"),
    ("void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>"
     "(at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>, fbgemm_gpu::FixedDivisor)",
     "compute", "other"),
    ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*)",
     "compute", "other"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800>", "compute",
     "other"),
    # from the synthetic GPU sample (names as PyTorch's flash attention and cuBLAS on H100 print them)
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4> >", "compute",
     "attention"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
     "compute", "GEMM"),
    # Inductor's kernel prefixes (torch/_inductor: triton_red_ reductions, triton_per_ persistent reductions,
    # triton_tem_ templates) and PyTorch's memory-efficient attention (fmha_cutlassF_...)
    ("triton_red_fused_sum_0", "compute", "reduction"),
    ("triton_per_fused__softmax_1", "compute", "reduction"),
    ("triton_tem_fused_mm_0", "compute", "GEMM"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "compute", "attention"),
])
def test_kernel_family_from_its_name(name: str, klass: str, family: str) -> None:
    # GIVEN a real kernel name and the class the loader gave it; THEN its family
    assert family_of(name, klass) == family


def _idle_trace() -> TraceBuilder:
    """Per 1000 us step: a 200 us host-bound gap the CPU spends in `prepare_batch`, then a run of tiny
    kernels launched by aten::add_ every 30 us (launch-bound gaps of 25 us)."""
    b = TraceBuilder(rank=0)
    for n, t0 in ((1, 0), (2, 1000)):
        b.step(n, t0, 1000)
        b.kernel("gemm_a", t0 + 10, 90, launch_ts=t0 + 1)  # GPU busy 10-100
        b.cpu("prepare_batch", t0 + 105, 180)  # the CPU works until 285
        b.cpu("aten::mul", t0 + 290, 8)
        b.kernel("mul_kernel", t0 + 300, 20, launch_ts=t0 + 292)  # launched after the GPU went idle at 100
        for i in range(12):
            start = t0 + 345 + 30 * i
            b.cpu("aten::add_", start - 10, 8)
            b.kernel("tiny_add_kernel", start, 5, launch_ts=start - 8)
    return b


def test_idle_finding_names_the_cpu_ops_in_the_gaps_and_the_launching_ops(tmp_path: Path) -> None:
    # GIVEN a host-bound gap of 200 us per step and launch-bound gaps before tiny kernels
    analysis = Analysis(_load(tmp_path, _idle_trace()))
    # WHEN the idle analyzer runs
    findings = {f.key: f for f in analyze_idle(analysis)}
    host, launch = findings["idle:host"], findings["idle:launch"]
    # THEN the host finding names what the CPU ran during the gap, with its time per step and share
    top = host.evidence["cpu_ops_while_idle"][0]
    assert (top["op"], top["kind"]) == ("prepare_batch", "cpu_op")
    assert top["ms_per_step"] == pytest.approx(0.18) and top["share_of_idle_pct"] == pytest.approx(90.0)
    assert "the CPU meanwhile ran prepare_batch (90% of that time)" in host.title
    # AND its longest gaps say which kernel came after and which op launched it
    gap = host.evidence["longest_gaps"][0]
    assert (gap["next_kernel"], gap["launched_by"], gap["gap_ms"]) == ("mul_kernel", "aten::mul", 0.2)
    assert gap["cpu_ops"].startswith("prepare_batch 0.18 ms")
    # AND the launch-bound finding names the tiny kernels and their launching op
    tiny = launch.evidence["tiny_kernels"][0]
    assert (tiny["kernel"], tiny["launched_by"], tiny["gaps_before"]) == ("tiny_add_kernel", "aten::add_", 24)  # 12 per step
    assert tiny["kernel_median_us"] == 5.0
    assert "most often before tiny_add_kernel (launched by aten::add_)" in launch.title


def test_slower_ops_rank_by_total_extra_time_per_step(tmp_path: Path) -> None:
    # GIVEN three ranks; on rank 2 a long op is 10% slower (+30 us per step) and a short one 4x (+90 us),
    # and a long op outside the steps is slower too (it must not count)
    builders = []
    for rank in range(3):
        slow = rank == 2
        b = TraceBuilder(rank=rank, world_size=3)
        for n, t0 in ((1, 0), (2, 1000)):
            b.step(n, t0, 1000).cpu("long_op", t0 + 10, 330 if slow else 300).cpu("short_op", t0 + 400,
                                                                                 120 if slow else 30)
        b.cpu("outside_steps", 3000, 900 if slow else 100)
        builders.append(b)
    analysis = Analysis(_load(tmp_path, *builders))
    # WHEN rank 2 is compared with its peers
    ops = slower_ops(analysis, 2)
    # THEN the op with the most extra time per step comes first, with the numbers behind it
    assert [o["name"] for o in ops] == ["short_op", "long_op"]
    assert ops[0]["extra_ms_per_step"] == pytest.approx(0.09) and ops[1]["extra_ms_per_step"] == pytest.approx(0.03)
    assert (ops[0]["ms_per_step"], ops[0]["peers_ms_per_step"], ops[0]["kind"]) == (0.12, 0.03, "cpu_op")
    assert ops[0]["count_per_step"] == 1.0


def test_long_kernel_names_shorten_the_same_way_in_titles_and_tables() -> None:
    # GIVEN names as CUDA traces print them; THEN the argument list goes, then nested template arguments,
    # then all of them, and what still does not fit is cut with an ellipsis
    assert short_symbol(ADD) == "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<…> >"
    assert short_symbol("void kernel<4, Functor<float>, Array<char*, 3> >(int)", 35) == "kernel<4, Functor<…>, Array<…> >"
    assert short_symbol("void kernel<4, Functor<float>, Array<char*, 3> >(int)", 20) == "kernel<…>"
    assert short_symbol("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == \
        "ncclKernel_AllReduce_RING_LL_Sum_float"
    assert short_symbol("Memcpy HtoD (Host -> Device)") == "Memcpy HtoD (Host -> Device)"  # not an argument list
    assert short_symbol("x" * 100, 20) == "x" * 19 + "…"
