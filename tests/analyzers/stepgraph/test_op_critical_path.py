"""The op-level critical path: exact ground truth per edge kind, HTA's single-rank path, and real multi-rank traces.

Synthetic (hand-written events, for exact ground truth only; every time in microseconds): one CPU thread that
launches kernels and synchronizes, one or two streams, and, for the cross-rank join, two ranks at one matched
collective. Real: HTA's end-to-end critical-path test trace with HTA 0.5's own overlaid output
(/work/shared/traces/hta, facebookresearch/HolisticTraceAnalysis, MIT), the DLRM set (tests/fixtures/dlrm_kineto,
8 V100 ranks, one step) and the real 4-rank gloo sample whose rank 2 runs a 5x forward.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import HTA_TRACES

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stepgraph.critical_path import assemble, critical_path_ops_view, pieces, walk
from perftracker.analyzers.stepgraph.op_graph import CLASSES, rank_graph
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.collectors.loading import LoadOptions, load_path

ROOT = Path(__file__).resolve().parents[3]
DLRM = ROOT / "tests" / "fixtures" / "dlrm_kineto"
GLOO = ROOT / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
END_TO_END = HTA_TRACES / "critical_path" / "end_to_end" / "simple_add"
US = 1000
MAIN = 1


def _events(rank: int, rows: list[tuple[str, str, int, int, int, int]]) -> pd.DataFrame:
    """(kind, name, stream, correlation, start_us, end_us) rows of one rank (the CPU ones on thread MAIN)."""
    frame = pd.DataFrame(rows, columns=["kind", "name", "stream", "correlation", "start", "end"])
    return pd.DataFrame({"rank": rank, "window": 0, "tid": np.where(frame["stream"] < 0, MAIN, 0),
                         "kind": frame["kind"], "name": frame["name"], "stream": frame["stream"],
                         "correlation": frame["correlation"], "start_ns": frame["start"] * US,
                         "dur_ns": (frame["end"] - frame["start"]) * US})


def _own(rows: list[tuple[str, str, int, int, int, int]], lo: int, hi: int) -> dict[str, int]:
    g = rank_graph(0, _events(0, rows), pd.DataFrame(columns=["source"]), pd.DataFrame(columns=["start_ns"]))
    vec, reached = walk(g, lo * US, tid=g.main, t=hi * US)
    assert reached == -1
    return {c: int(v) // US for c, v in zip(CLASSES, vec) if v}


def test_launch_delay_and_host_sync_edges_give_exact_classes() -> None:
    # GIVEN a launch [0, 10] of a kernel that runs [50, 150], a data-loader op [10, 15], a synchronize [20, 160]
    rows = [("runtime", "cudaLaunchKernel", -1, 1, 0, 10), ("annotation", "DataLoader.__next__", -1, -1, 10, 15),
            ("runtime", "cudaDeviceSynchronize", -1, 2, 20, 160), ("compute", "gemm", 7, 1, 50, 150)]
    # WHEN the step [0, 200] is walked back from its end
    got = _own(rows, 0, 200)
    # THEN: CPU after the sync (40), the sync's return after the kernel (10), the kernel (100), the launch delay
    # from the launch's end to the kernel's start (40), the launch itself (10); the data-loader op lies off the path
    assert got == {"gpu_compute": 100, "host_sync": 10, "cpu_launch": 90}
    # AND with the kernel launched late instead (CPU-bound), the data-loader op on the path is data loading
    late = [("annotation", "DataLoader.__next__", -1, -1, 0, 30), ("runtime", "cudaLaunchKernel", -1, 1, 40, 50),
            ("compute", "gemm", 7, 1, 52, 150), ("runtime", "cudaDeviceSynchronize", -1, 2, 60, 160)]
    assert _own(late, 0, 200) == {"gpu_compute": 98, "host_sync": 10, "data_loading": 30, "cpu_launch": 62}


def test_kernel_to_kernel_and_cross_stream_waits() -> None:
    # GIVEN kernel A [50, 150] on stream 7; B launched at [20, 30] on stream 7 starts at 151 (kernel-to-kernel)
    same = [("runtime", "cudaLaunchKernel", -1, 1, 0, 10), ("runtime", "cudaLaunchKernel", -1, 2, 20, 30),
            ("compute", "a", 7, 1, 50, 150), ("compute", "b", 7, 2, 151, 251),
            ("runtime", "cudaStreamSynchronize", -1, 3, 40, 260)]
    # THEN B follows A on its stream: A, the 1 us gap, B, all GPU-bound behind the first launch
    assert _own(same, 0, 300) == {"gpu_compute": 200, "host_sync": 9, "cpu_launch": 40 + 1 + 40 + 10}
    # GIVEN the same with B on stream 8 (a cudaStreamWaitEvent on A's completion): B starts 2 us after A's end
    other = [(k, n, 8 if n == "b" else s, c, a, b) for k, n, s, c, a, b in same]
    other[3] = ("compute", "b", 8, 2, 152, 252)
    # THEN the cross-stream wait puts A on the path too (2 us gap), not B's launch
    assert _own(other, 0, 300) == {"gpu_compute": 200, "host_sync": 8, "cpu_launch": 40 + 2 + 40 + 10}


def test_a_cuda_graph_launch_is_one_node() -> None:
    # GIVEN one cudaGraphLaunch whose three kernels share its correlation id on one stream
    rows = [("runtime", "cudaGraphLaunch", -1, 5, 0, 10), ("compute", "k1", 7, 5, 20, 40),
            ("compute", "k2", 7, 5, 41, 60), ("compute", "k3", 7, 5, 61, 90),
            ("runtime", "cudaDeviceSynchronize", -1, 6, 12, 95)]
    g = rank_graph(0, _events(0, rows), pd.DataFrame(columns=["source"]), pd.DataFrame(columns=["start_ns"]))
    # THEN it is one node from the first kernel's start to the last one's end, released by the graph launch
    assert len(g.end) == 1 and (g.start[0], g.end[0], g.launch[0]) == (20 * US, 90 * US, 10 * US)
    assert _own(rows, 0, 100) == {"gpu_compute": 70, "host_sync": 5, "cpu_launch": 5 + 10 + 10}


def test_two_ranks_waiting_for_the_last_one_and_the_path_across_them() -> None:
    # GIVEN rank 1 computes [10, 300] before the collective; rank 0 arrives at 100; the transfer ends at 350
    r0 = [("runtime", "cudaLaunchKernel", -1, 1, 0, 5), ("compute", "small", 7, 1, 10, 90),
          ("runtime", "cudaLaunchKernel", -1, 2, 80, 90), ("comm", "ncclAllReduce", 9, 2, 100, 350),
          ("runtime", "cudaStreamSynchronize", -1, 3, 95, 355)]
    r1 = [("runtime", "cudaLaunchKernel", -1, 1, 0, 5), ("compute", "big", 7, 1, 10, 300),
          ("runtime", "cudaLaunchKernel", -1, 2, 250, 260), ("comm", "ncclAllReduce", 9, 2, 300, 350),
          ("runtime", "cudaStreamSynchronize", -1, 3, 270, 355)]
    steps = pd.DataFrame({"step": [1], "start_ns": [0], "dur_ns": [400 * US]})
    parts = []
    for rank, rows, start, wait in ((0, r0, 100, 200), (1, r1, 300, 0)):
        matched = pd.DataFrame({"source": ["gpu_kernel"], "window": [0], "start_ns": [start * US], "instance": [0],
                                "wait_ns": [wait * US], "waited_for": [1], "step": [1],
                                "dur_ns": [(350 - start) * US]})
        parts.append(pieces(rank_graph(rank, _events(rank, rows), matched, steps), steps))
    # WHEN the pieces are joined
    table = assemble(pd.concat(parts, ignore_index=True), pd.Series({0: 0, 1: 0}))
    own = {(int(r), b, int(f)): int(n) // US for r, b, f, n in zip(table["rank"], table["bound"],
                                                                    table["for_rank"], table["ns"]) if n}
    path = {(int(r), b): int(n) // US for r, b, n in zip(table["rank"], table["bound"], table["path_ns"]) if n}
    # THEN rank 0 waited 200 us for rank 1, and each rank's classes add up to its 400 us step
    assert own == {(0, "cpu_launch", -1): 145, (0, "host_sync", -1): 5, (0, "transfer", -1): 50,
                   (0, "wait", 1): 200, (1, "cpu_launch", -1): 55, (1, "host_sync", -1): 5,
                   (1, "transfer", -1): 50, (1, "gpu_compute", -1): 290}
    # AND the path crosses to rank 1 at the collective: rank 1's compute, not rank 0's wait, is on it
    assert path == {(0, "cpu_launch"): 45, (0, "host_sync"): 5, (0, "transfer"): 50, (1, "gpu_compute"): 290,
                    (1, "cpu_launch"): 10}


@pytest.mark.skipif(not END_TO_END.is_dir(), reason="the shared HTA corpus is not here")
def test_hta_single_rank_path_agrees_on_its_gpu_work() -> None:
    # GIVEN HTA's end-to-end critical-path trace (one rank, no ProfilerStep) and HTA 0.5's overlaid output of it
    store = load_path(END_TO_END / "input", LoadOptions(workers=1, cache_dir=None))
    ev = store.rank_events(store.event_ranks()[0])
    g = rank_graph(0, ev, pd.DataFrame(columns=["source"]), pd.DataFrame(columns=["start_ns"]))
    cpu = ev[ev["stream"] < 0]
    lo, hi = int(ev["start_ns"].min()), int((cpu["start_ns"] + cpu["dur_ns"])[cpu["tid"] == g.main].max())
    # WHEN the whole trace is walked back from the main thread's last event
    seen: list[int] = []
    vec, _ = walk(g, lo, tid=g.main, t=hi, visited=seen)
    ours = {(int(g.start[i]) // US, int(g.end[i] - g.start[i]) // US) for i in seen}
    doc = json.loads(gzip.decompress((END_TO_END / "output" / "overlaid_critical_path_trace.json.gz").read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    hta = {(int(e["ts"]), int(e["dur"])): e for e in xs if e.get("args", {}).get("critical")
           and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    # THEN the path's length is the walked span and its classes add up to it
    assert int(vec.sum()) == hi - lo
    # AND every GPU op on our path is on HTA's (the 16 host-to-device copies that bound the start)
    assert ours and ours <= set(hta)
    # AND each GPU op HTA has and we do not ended before the synchronizing call HTA's path takes next began: the
    # GPU was idle before the sync, so the CPU bound it (HTA draws its sync edge from the last kernel regardless)
    syncs = sorted(int(e["ts"]) for e in xs if e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"]
                   and e.get("args", {}).get("critical"))
    for ts, dur in set(hta) - ours:
        after = [s for s in syncs if s >= ts]
        assert after and ts + dur < after[0]


def _measured(analysis: Analysis) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = analysis.store.steps
    prof = steps[steps["source"].astype(str) == "profiler"].groupby(["step", "rank"], as_index=False).agg(
        start_ns=("start_ns", "min"), dur_ns=("dur_ns", "max"))
    off = prof["rank"].map(analysis.view(arrivals_view).offsets).fillna(0).astype(np.int64)
    return prof, prof.assign(lo=prof["start_ns"] - off, hi=prof["start_ns"] + prof["dur_ns"] - off)


def _check_real(analysis: Analysis) -> pd.DataFrame:
    table = analysis.view(critical_path_ops_view)
    prof, aligned = _measured(analysis)
    own = table.groupby(["step", "rank"])["ns"].sum()
    # each rank's classes add up to its measured step time exactly
    assert own.to_dict() == prof.set_index(["step", "rank"])["dur_ns"].to_dict()
    # the cross-rank path runs from the last rank to finish back to the start of one rank's step (aligned clocks):
    # its length is one of those measured spans, to the microsecond
    for step, group in aligned.groupby("step"):
        length = int(table.loc[table["step"] == step, "path_ns"].sum())
        spans = group["hi"].max() - group["lo"].to_numpy()
        assert np.min(np.abs(spans - length)) <= 1000, (step, length, spans)
    return table


def test_real_dlrm_classes_add_up_and_the_ranks_wait_for_rank_7() -> None:
    # GIVEN the real 8-rank DLRM step, in which rank 7 arrives last at most collectives
    analysis = Analysis(load_path(DLRM, LoadOptions(workers=1)))
    # WHEN its op-level critical path is computed
    table = _check_real(analysis)
    # THEN most of every other rank's waiting is for rank 7, and the path reaches rank 7's own work
    waits = table[table["bound"] == "wait"]
    assert waits.groupby("for_rank")["ns"].sum().idxmax() == 7
    assert table.loc[table["rank"] == 7, "path_ns"].sum() > 0


def test_real_gloo_path_runs_through_the_slowed_rank() -> None:
    # GIVEN the real 4-rank gloo job whose rank 2 runs a 5x forward
    analysis = Analysis(load_path(GLOO, LoadOptions(workers=1)))
    # WHEN its op-level critical path is computed (timed: it must stay cheap)
    started = time.process_time()
    table = _check_real(analysis)
    assert time.process_time() - started < 20.0  # about 0.2 s on an idle core: generous under load
    # THEN rank 2's own CPU work holds the largest share of the path, and the others wait for rank 2 most
    cpu = table[table["bound"] == "cpu_launch"].groupby("rank")["path_ns"].sum()
    assert cpu.idxmax() == 2
    waits = table[table["bound"] == "wait"].groupby("for_rank")["ns"].sum()
    assert waits.idxmax() == 2


@pytest.mark.skipif(not (HTA_TRACES / "critical_path").is_dir(), reason="the shared HTA corpus is not here")
@pytest.mark.parametrize("name", ["cuda_event_sync", "cuda_event_sync_multi_stream"])
def test_hta_sync_traces_put_the_kernel_a_sync_waited_for_on_the_path(name: str) -> None:
    # GIVEN HTA's synchronization test traces (one rank): a cudaEventSynchronize / cudaDeviceSynchronize that
    # returns just after the kernel it waits for ends (HTA's tests expect a sync edge from that kernel)
    store = load_path(HTA_TRACES / "critical_path" / name, LoadOptions(workers=1, cache_dir=None))
    ev = store.rank_events(store.event_ranks()[0])
    g = rank_graph(0, ev, pd.DataFrame(columns=["source"]), pd.DataFrame(columns=["start_ns"]))
    cpu = ev[ev["stream"] < 0]
    lo, hi = int(ev["start_ns"].min()), int((cpu["start_ns"] + cpu["dur_ns"])[cpu["tid"] == g.main].max())
    # WHEN walked back from the main thread's last event
    seen: list[int] = []
    vec, _ = walk(g, lo, tid=g.main, t=hi, visited=seen)
    # THEN the kernel that ended last inside a synchronizing call is on the path, behind a host_sync edge
    names = ev["name"].astype(str)
    syncs = ev[(ev["kind"] == "runtime").to_numpy() & names.str.contains("Synchronize").to_numpy()]
    kernels = ev[(ev["kind"] == "compute").to_numpy()]
    k_end = (kernels["start_ns"] + kernels["dur_ns"]).to_numpy()
    waited = [int(kernels["start_ns"].to_numpy()[k_end <= e][np.argmax(k_end[k_end <= e])])
              for s, e in zip(syncs["start_ns"], syncs["start_ns"] + syncs["dur_ns"]) if ((k_end >= s) & (k_end <= e)).any()]
    assert waited and int(waited[-1]) in {int(g.start[i]) for i in seen}
    assert vec[CLASSES.index("host_sync")] > 0 and int(vec.sum()) == hi - lo
