"""Communication kernels are recognized by library without flags, and compute kernels are not.

Every name below is a real kernel name, as a trace writes it, taken from a public trace or from the
library's sources (each entry says where); names from sources are written as the demangler prints
them (template arguments elided to what the source fixes). The compute kernels of the shared real
traces are a recorded fixture (scripts/record_kernel_names.py), so these tests need no corpus.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.collectors.traces.comm_kernels import (
    CUSTOM_FAMILY,
    CommKernels,
    builtin_families,
    load_comm_kernels,
)
from perftracker.errors import InputError, UsageError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kernels" / "shared_trace_kernel_names.json.gz"

COMM = [
    # NCCL: the shared HTA traces (old ncclKernel_*), NCCL >= 2.19 names (HolisticTraceAnalysis issue 122),
    # NVIDIA/nccl src/device/symmetric/generate.py (ncclSymkDevKernel_*) and src/device/onerank.cu
    ("nccl", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
    ("nccl", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
    ("nccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("nccl", "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"),
    ("nccl", "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16(ncclSymkDevWorkArgs4K)"),
    ("nccl", "void oneRankReduce<FuncSum<float> >(void*, void*, unsigned long, unsigned long, bool)"),
    # RCCL: ROCm/rccl src/device/common.cu (ncclDevKernel_Generic_4 since the unroll templates of 89349f2c)
    ("rccl", "ncclDevKernel_Generic_4(ncclDevComm*, channelMasks, ncclWork*)"),
    ("rccl", "ncclDevKernelDebug_Generic(ncclDevComm*, channelMasks, ncclWork*)"),
    # MSCCL: microsoft/msccl and ROCm/rccl src/include/msccl/msccl_kernel.h (MSCCL_KERNEL_ENTRY_NAME)
    ("msccl", "mscclKernel_Sum_half_LL(ncclDevComm*, mscclAlgo*, mscclWork*)"),
    ("msccl", "mscclKernel_Sum_bfloat16_Simple_fullOps(ncclDevComm*, mscclAlgo*, mscclWork*)"),
    # MSCCL++: microsoft/mscclpp src/ext/collectives, src/core/include/execution_kernel.hpp, apps/nccl (older)
    ("mscclpp", "void mscclpp::collective::allreduceAllPairs<__half>(__half*, __half*, __half*, "
                "mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long, int, int, int, unsigned long)"),
    ("mscclpp", "void mscclpp::executionKernel<__nv_bfloat16, false>(int, __nv_bfloat16*, __nv_bfloat16*)"),
    ("mscclpp", "void allreduce8<__half>(__half*, __half*, __half*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*)"),
    ("mscclpp", "void allgather6<false>(void*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long)"),
    # DeepEP-style expert parallelism: deepseek-ai/DeepEP sources (first commit ebfe47e; legacy/ and elastic
    # impls/ at dd758ca) and deepseek-ai/profile-data train.json / decode.json (published PyTorch profiler traces)
    ("deepep", "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*, int, int, int)"),
    ("deepep", "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*)"),
    ("deepep", "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, float const*)"),
    ("deepep", "void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int)"),
    ("deepep", "void deep_ep::internode_ll::dispatch<false, 3, 10, 7168>(void*, float*, int*, long*, int*)"),
    ("deepep", "void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)"),
    ("deepep", "void deep_ep::legacy::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*)"),
    ("deepep", "void deep_ep::elastic::hybrid_dispatch_impl<true, false, 8>(void*, int*, long*, float*)"),
    ("deepep", "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, "
               "bool const*, int4 const*, float const*, int4 const*, int4 const*)"),
    ("deepep", "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, "
               "dpsk::ep::internode::SourceMeta*, int4 const*, float const*, long const*)"),
    ("deepep", "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, int*)"),
    ("deepep", "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*)"),
    ("deepep", "void dpsk::ep::internode::dispatch_ll<false>(void*, float*, int*, long*)"),
    # pplx-kernels: perplexityai/pplx-kernels csrc/all_to_all/intranode_dispatch.cu, internode_combine.cu
    ("pplx", "void (anonymous namespace)::dispatchKernel<4u, true, true>(int*, unsigned long, std::byte*)"),
    ("pplx", "void (anonymous namespace)::combineKernel<__nv_bfloat16, __nv_bfloat16, 16ul, true, true>(__nv_bfloat16*)"),
    # NVSHMEM on-stream collectives: NVSHMEM src/host/coll (vendored in bytedance/flux 3rdparty/nvshmem)
    ("nvshmem", "barrier_on_stream_kernel(int, int, int, long*, long*)"),
    ("nvshmem", "void barrier_on_stream_kernel_threadgroup<(threadgroup_t)3>(int, int)"),
    # Transformer Engine userbuffers: transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu
    ("te_userbuffers", "void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, int, void**, int, "
                       "unsigned long, int)"),
    ("te_userbuffers", "void userbuffers_fp16_sum_inplace_gpu_mc_ag<4>(int, int, int, int, int, int, void**, int)"),
    ("te_userbuffers", "kuserbuffers_pushsend(int*, int*, int4*, int4*, int)"),
    # oneCCL: oneapi-src/oneCCL src/coll/algorithms/*/sycl/*.hpp (SYCL kernel classes) and src/kernels/kernels.cl
    ("oneccl", "AllreduceLargeKernel_GlobalSync<float>"),
    ("oneccl", "Allreduce_small_kernel<sycl::_V1::ext::oneapi::bfloat16, 4>"),
    ("oneccl", "ReduceScatterMediumKernel_local_copy<float, 4>"),
    ("oneccl", "allreduce_kernel_float32_sum"),
    ("oneccl", "alltoallv_kernel_8_bfloat16_custom"),
    # HCCL: Ascend mstt / msprof-analyze cluster_analyse documentation (communication operator names)
    ("hccl", "hcom_allReduce__606_0_1"),
    ("hccl", "hcom_reduceScatter_AicpuKernel_503_490_1"),
    ("hccl", "hcom_send_1_2_1"),
    # PyTorch symmetric memory: pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu,
    # CUDASymmetricMemory.cu and nvshmem_extension.cu
    ("symm_mem", "void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8, false, false>("
                 "c10::BFloat16**, c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long)"),
    ("symm_mem", "void (anonymous namespace)::multimem_one_shot_all_reduce_kernel<float, 16>(float*, float*)"),
    ("symm_mem", "c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int, unsigned long)"),
    ("symm_mem", "c10d::nvshmem_extension::allToAllV(void*, void*, long*, unsigned long, int, int)"),
]

NOT_COMM = [
    # the MoE training trace of deepseek-ai/profile-data (train.json): its compute kernels, the local
    # dispatch-layout computation included
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel>("
    "dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel::Params)",
    "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, cute::C<192> > > >()",
    "void cuda::reduce_fused_impl<__nv_bfloat16, false, false>(int4 const*, float const*, int const*, int4*)",
    "void cuda::clean_and_count_expert<512>(long const*, int*, int*, int*, int*, int*, int, int, int, int)",
    "void cuda::swiglu_forward_backward_with_weight_impl<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "_copy_tensor_kernel",
    "rotary_kernel",
    # cub's dispatch types, DeepEP V2's local epilogues, Triton
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*, int*, int*, cub::Equality> >()",
    "void deep_ep::elastic::dispatch_copy_epilogue_impl<8>(void*, void*, int*)",
    "triton_poi_fused_add_mul_0",
]


@pytest.fixture(scope="module")
def matcher() -> CommKernels:
    return load_comm_kernels()


@pytest.mark.parametrize("family, name", COMM, ids=[f"{f}:{n[:40]}" for f, n in COMM])
def test_each_library_is_communication_by_default(matcher: CommKernels, family: str, name: str) -> None:
    # GIVEN a real kernel name of a communication library WHEN it is classified THEN it is that library's
    assert matcher.family_of(name) == family


@pytest.mark.parametrize("name", NOT_COMM, ids=[n[:40] for n in NOT_COMM])
def test_compute_kernels_of_moe_training_are_not_communication(matcher: CommKernels, name: str) -> None:
    assert matcher.family_of(name) == ""


def test_compute_kernels_of_the_shared_traces_are_not_communication(matcher: CommKernels) -> None:
    # GIVEN every distinct kernel name of the shared real traces (GEMM, conv, elementwise, reductions,
    # scatter/gather, attention, Triton, MTIA; recorded as a fixture)
    kernels = json.loads(gzip.decompress(FIXTURE.read_bytes()))["kernels"]
    names = {n for per_trace in kernels.values() for n in per_trace}
    assert len(names) > 500
    # WHEN each is classified THEN only NCCL's own kernels are communication
    matched = {n: matcher.family_of(n) for n in names if matcher.family_of(n)}
    assert set(matched.values()) == {"nccl"}
    assert all(n.startswith("ncclKernel_") for n in matched)
    assert len(matched) == 5


def test_every_family_says_where_its_names_come_from() -> None:
    families = builtin_families()
    assert {f.name for f in families} == {"nccl", "rccl", "msccl", "mscclpp", "deepep", "pplx", "nvshmem",
                                          "te_userbuffers", "oneccl", "hccl", "symm_mem"}
    assert all(f.sources and f.library for f in families)
    assert {f.name for f in families if f.expert_parallel} == {"deepep", "pplx"}
    assert {family for family, _ in COMM} == {f.name for f in families}  # every family tested above


def test_user_file_adds_a_library_and_extends_a_known_one(tmp_path: Path) -> None:
    # GIVEN a user file with a new library and one more pattern for a shipped family
    path = tmp_path / "mine.toml"
    path.write_text('[[family]]\nname = "mylib"\nlibrary = "in-house all-to-all"\nexpert_parallel = true\n'
                    "patterns = ['^mylib_a2a_']\n\n"
                    '[[family]]\nname = "nccl"\npatterns = [\'^my_nccl_wrapper_\']\n')
    # WHEN the matcher is built with it and a --comm-kernel regex
    matcher = load_comm_kernels([path], ["^fused_allreduce_rmsnorm"])
    # THEN the new names are communication of the right family, the shipped ones still are
    assert matcher.family_of("mylib_a2a_dispatch(int*)") == "mylib"
    assert matcher.family_of("my_nccl_wrapper_kernel()") == "nccl"
    assert matcher.family_of("fused_allreduce_rmsnorm_kernel<float>") == CUSTOM_FAMILY
    assert matcher.family_of("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") == "nccl"
    assert matcher.expert_parallel() == {"deepep", "pplx", "mylib"}
    assert matcher.fingerprint() != load_comm_kernels().fingerprint()


@pytest.mark.parametrize("text, what", [
    ("this is = = not toml", "not valid TOML"),
    ('[[family]]\nname = "x"\n', "needs a name"),
    ('[[family]]\nname = "x"\npatterns = ["(unclosed"]\n', "not a valid regular expression"),
    ("title = 'no families'\n", "no [[family]] tables"),
])
def test_a_bad_user_file_is_an_input_error_naming_it(tmp_path: Path, text: str, what: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_comm_kernels([path])
    assert what in err.value.message and "bad.toml" in err.value.message


def test_a_bad_comm_kernel_regex_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as err:
        load_comm_kernels([], ["(oops"])
    assert "--comm-kernel" in err.value.message


def test_analyze_counts_a_user_library_from_the_environment_end_to_end(tmp_path: Path) -> None:
    # GIVEN a trace with an in-house all-to-all kernel, and a file naming it set in PERFTRACKER_COMM_KERNELS
    b = TraceBuilder(rank=0).step(1, 0, 1000).kernel("gemm", 0, 500, launch_ts=-5)
    b.kernel("acme_a2a_dispatch(int*)", 400, 400, launch_ts=-4, stream=20)
    b.write(tmp_path / "t" / "rank-0.json")
    kernels = tmp_path / "acme.toml"
    kernels.write_text('[[family]]\nname = "acme"\nexpert_parallel = true\npatterns = [\'^acme_a2a_\']\n')
    env = {**os.environ, "PERFTRACKER_COMM_KERNELS": str(kernels)}
    # WHEN analyzed from the command line
    done = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(tmp_path / "t"), "-o",
                           str(tmp_path / "out"), "--no-cache", "--quiet"], capture_output=True, text=True,
                          env=env, timeout=300)
    # THEN its kernel is expert-parallel communication, 100 of its 400 us hidden under the GEMM
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "out" / "findings.json").read_text())
    [summary] = [f for f in doc["findings"] if f["analyzer"] == "breakdown"]
    rank0 = summary["evidence"]["per_rank"]["0"]
    assert rank0["by_library"] == {"acme": {"ms_per_step": 0.4, "hidden_pct": 25.0}}
    assert rank0["expert_parallel_hidden_pct"] == 25.0
    # AND a file that is not TOML is one line naming it, exit 2
    kernels.write_text("not toml at all = = =")
    bad = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(tmp_path / "t"), "-o",
                          str(tmp_path / "out2"), "--comm-kernels", str(kernels)], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "acme.toml" in bad.stderr and "not valid TOML" in bad.stderr
