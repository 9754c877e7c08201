"""The Kineto loader on real traces and on bad input."""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.traces.kineto import collective_of
from perftracker.collectors.traces.kineto_read import parse_trace
from perftracker.errors import InputError

KINETO_FILES = [
    "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "call_stack/backward_thread.json",
    "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
    "df_index_resolver/df_index_resolver.json.gz",
    "distributed_info_unavailable/distributed_info_not_found.json.gz",
    "mtia_inference_trace/mtia_inference_rank_0.json.gz",
    "mtia_trace_single_rank/mtia_rank_0.json.gz",
    "nccl_parser_config/nccl_data.json.gz",
    "negative_queue_length_values_check/rank0.json.gz",
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "rank_non_gpu/rank_non_gpu.json.gz",
    "rank_unavailable/rank_not_found.json.gz",
    "trace_diff/control/control.json.gz",
    "trace_file_list/inference_rank_1.json.gz",
    "trace_filter/sampled_rank-0.json.gz",
    "triton_example/triton_example.json.gz",
    "with_gpu_user_annotation/step_based_trace_2543932.json.gz",
]


def load(path: Path) -> object:
    return load_path(path, LoadOptions(workers=1))


@pytest.mark.parametrize("name", KINETO_FILES)
def test_every_real_trace_loads(hta_traces: Path, tmp_path: Path, name: str) -> None:
    # GIVEN a real trace from the HTA corpus (NVIDIA, AMD, MTIA, CPU-only, no distributedInfo, ...)
    # WHEN it is loaded
    store = load_path(hta_traces / name, LoadOptions(workers=1))
    # THEN events are classified and no input error is noted
    assert len(store.events) > 0
    assert not [n for n in store.notes if n.level == "error"]
    assert set(store.events["kind"].unique()) <= {"compute", "comm", "memcpy", "memset", "sync", "cpu_op",
                                                  "runtime", "annotation", "collective_cpu", "gpu_annotation",
                                                  "counter_range"}


def test_gpu_kernels_split_into_compute_and_nccl_communication(hta_traces: Path, tmp_path: Path) -> None:
    # GIVEN the real DDP trace with 2020 NCCL AllReduce kernels
    store = load_path(hta_traces / "df_index_resolver", LoadOptions(workers=1))
    comm = store.events[store.events["kind"] == "comm"]
    # THEN every NCCL kernel is communication, named all_reduce, and the rank comes from distributedInfo
    assert len(comm) == 2020
    assert set(comm["collective"]) == {"all_reduce"}
    assert list(store.ranks["rank"]) == [1]
    assert sorted(store.steps["step"]) == [2, 3, 4, 5, 6]


def test_gloo_and_cpu_collectives_are_recognised(hta_traces: Path, tmp_path: Path) -> None:
    store = load_path(hta_traces / "cpu_only", LoadOptions(workers=1))
    coll = store.events[store.events["kind"] == "collective_cpu"]
    assert len(coll) == 10 and set(coll["collective"]) == {"all_reduce"}
    assert int(store.ranks["rank"].iloc[0]) == 34


def test_kernel_launches_are_correlated_to_steps(hta_traces: Path, tmp_path: Path) -> None:
    store = load_path(hta_traces / "trace_filter", LoadOptions(workers=1))
    gpu = store.events[store.events["stream"] >= 0]
    # GPU work runs after its step's CPU window; it still belongs to the step that launched it
    assert (gpu["step"] >= 0).mean() > 0.9
    assert set(gpu["step"].unique()) - {-1} <= {551, 552}


def test_nanosecond_digits_survive_epoch_magnitudes(tmp_path: Path) -> None:
    # GIVEN a trace whose timestamps are epoch microseconds with nanosecond fractions
    raw = ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
           '"ts": 1682725898236567.123, "dur": 1.001}, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, '
           '"tid": 1, "ts": 1682725898236567.124, "dur": 2}]}')
    path = tmp_path / "rank-0.json"
    path.write_text(raw)
    # WHEN parsed
    trace = parse_trace(path)
    # THEN every digit is kept (a float64 would round both to ...567.125)
    assert trace.ts_ns == [1682725898236567123, 1682725898236567124]
    assert trace.dur_ns == [1001, 2000]


def test_integer_epoch_microseconds_stay_exact(hta_traces: Path) -> None:
    trace = parse_trace(hta_traces / "trace_filter" / "sampled_rank-0.json.gz")
    assert trace.ts_ns[0] == 1682725898236567000


def test_rank_from_file_name_when_distributed_info_is_missing(tmp_path: Path) -> None:
    for rank in (3, 5):
        TraceBuilder(rank=None).step(1, 0, 100).write(tmp_path / "traces" / f"worker{rank}.pt.trace.json")
    store = load_path(tmp_path / "traces", LoadOptions(workers=1))
    assert sorted(store.ranks["rank"]) == [3, 5]


def test_two_files_claiming_one_rank_in_the_same_window_is_an_error(tmp_path: Path) -> None:
    TraceBuilder(rank=1).step(1, 0, 100).write(tmp_path / "t" / "a.json")
    TraceBuilder(rank=1).step(1, 50, 100).write(tmp_path / "t" / "b.json")
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "t", LoadOptions(workers=1))
    assert "a.json" in err.value.message and "b.json" in err.value.message


def test_separate_profiling_windows_of_one_rank_are_kept_apart(tmp_path: Path) -> None:
    TraceBuilder(rank=1).step(1, 0, 100).write(tmp_path / "t" / "w1.json")
    TraceBuilder(rank=1).step(9, 10_000, 100).write(tmp_path / "t" / "w2.json")
    store = load_path(tmp_path / "t", LoadOptions(workers=1))
    assert sorted(store.ranks["window"]) == [0, 1]
    assert any("2 profiling windows" in n.message for n in store.notes)


def test_ranks_absent_from_world_size_are_a_note(tmp_path: Path) -> None:
    TraceBuilder(rank=0, world_size=8).step(1, 0, 100).write(tmp_path / "t" / "rank-0.json")
    store = load_path(tmp_path / "t", LoadOptions(workers=1))
    notes = [n for n in store.notes if "1 of 8 ranks" in n.message]
    assert notes and notes[0].level == "info"


def _truncate(src: Path, dst: Path, fraction: float) -> None:
    data = gzip.decompress(src.read_bytes())
    dst.write_bytes(data[: int(len(data) * fraction)])


def test_trace_cut_off_mid_write_is_recovered_with_a_warning(hta_traces: Path, tmp_path: Path) -> None:
    # GIVEN rank 1's trace cut at 70% of its bytes (the job was killed while exporting)
    folder = tmp_path / "t"
    folder.mkdir()
    _truncate(hta_traces / "trace_filter" / "sampled_rank-1.json.gz", folder / "rank-1.json", 0.7)
    (folder / "rank-0.json.gz").write_bytes((hta_traces / "trace_filter" / "sampled_rank-0.json.gz").read_bytes())
    # WHEN the folder is analyzed
    store = load_path(folder, LoadOptions(workers=1))
    # THEN rank 1 keeps the events before the cut and a warning names the file and the loss
    full = parse_trace(hta_traces / "trace_filter" / "sampled_rank-1.json.gz")
    rank1 = store.events[store.events["rank"] == 1]
    assert 0.5 * len(full.names) < len(rank1) < len(full.names)
    warning = [n for n in store.notes if n.level == "warning" and "rank-1.json" in n.source]
    assert warning and "cut off" in warning[0].message and "lost" in warning[0].message
    assert set(store.ranks["rank"]) == {0, 1}


def test_gzip_stream_cut_off_is_recovered(hta_traces: Path, tmp_path: Path) -> None:
    data = (hta_traces / "trace_filter" / "sampled_rank-0.json.gz").read_bytes()
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(data[: len(data) // 2])
    trace = parse_trace(path)
    assert len(trace.names) > 100
    assert any("gzip stream ends early" in n for n in trace.notes)


@pytest.mark.parametrize("content, expected", [
    (b"", "empty"),
    (b"\x1f\x8b\x08\x00garbage-not-deflate", "corrupt gzip"),
    (b'{"hello": "world"}', "not a PyTorch profiler trace"),
    (b"this is a log file, not json", "not JSON"),
])
def test_unusable_file_gets_one_clear_line_and_the_others_still_load(tmp_path: Path, content: bytes,
                                                                     expected: str) -> None:
    folder = tmp_path / "t"
    TraceBuilder(rank=0).step(1, 0, 100).kernel("gemm", 10, 20).write(folder / "rank-0.json")
    bad = folder / "rank-1.json.gz" if content.startswith(b"\x1f\x8b") else folder / "rank-1.json"
    bad.write_bytes(content)
    store = load_path(folder, LoadOptions(workers=1))
    errors = [n for n in store.notes if n.level == "error"]
    assert len(errors) == 1 and bad.name in errors[0].message and expected in errors[0].message
    assert "\n" not in errors[0].message
    assert set(store.ranks["rank"]) == {0}


def test_only_unusable_files_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "rank-0.json").write_text("")
    with pytest.raises(InputError) as err:
        load_path(tmp_path, LoadOptions(workers=1))
    assert "rank-0.json" in err.value.message


def test_user_patterns_mark_custom_kernels_as_communication(tmp_path: Path) -> None:
    TraceBuilder(rank=0).step(1, 0, 100).kernel("my_custom_allreduce_kernel", 10, 20).write(tmp_path / "t" / "r.json")
    plain = load_path(tmp_path / "t", LoadOptions(workers=1))
    custom = load_path(tmp_path / "t", LoadOptions(workers=1, comm_kernel_patterns=("custom_allreduce",)))
    assert set(plain.events.loc[plain.events["stream"] >= 0, "kind"]) == {"compute"}
    assert set(custom.events.loc[custom.events["stream"] >= 0, "kind"]) == {"comm"}


@pytest.mark.parametrize("name, hint, expected", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float", None, "all_reduce"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", None, "reduce_scatter"),
    ("ncclAllGatherRingLLKernel_copy_i8", None, "all_gather"),
    ("gloo:all_reduce", None, "all_reduce"),
    ("c10d::broadcast_", None, "broadcast"),
    ("record_param_comms", "allreduce", "all_reduce"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", None, "send_recv"),
])
def test_collective_names_are_canonical(name: str, hint: str | None, expected: str) -> None:
    assert collective_of(name, hint) == expected


def test_loader_cache_returns_the_same_tables(tmp_path: Path, hta_traces: Path) -> None:
    options = LoadOptions(workers=1, cache_dir=tmp_path / "cache")
    first = load_path(hta_traces / "trace_filter", options)
    second = load_path(hta_traces / "trace_filter", options)
    assert len(list((tmp_path / "cache").glob("*.events.parquet"))) == 2
    assert first.events.equals(second.events)


def test_parallel_and_serial_loading_agree(tmp_path: Path, hta_traces: Path) -> None:
    serial = load_path(hta_traces / "trace_filter", LoadOptions(workers=1))
    parallel = load_path(hta_traces / "trace_filter", LoadOptions(workers=2))
    assert serial.events.equals(parallel.events)
    assert json.dumps(asdict(serial.run_info), default=str) == json.dumps(asdict(parallel.run_info), default=str)
