"""Nsight Systems path vs Kineto path: events per second to read one rank's trace into the Store's tables.

Both inputs are SYNTHETIC and hold the same events: `--kernels` GPU kernels, each launched by a
cudaLaunchKernel inside an op range (`aten::mm` as a Kineto cpu_op / as an autograd-nvtx NVTX range),
in ProfilerStep ranges of 100 kernels. The Kineto trace is a plain .json (tests/tracegen.py's layout);
the export follows Nsight's documented schema (tests/nsys_fixtures.py's layout, filled in bulk). Timed:
`trace_map.parse_one` without cache (read + parse + tables) against `nsys.load.read_export` (SQL + tables),
best of `--repeat`. Also the real 2-GPU export of tests/fixtures/nsys, for a real-world rate.

    python benchmarks/bench_nsys.py --kernels 100000
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perftracker.collectors.nsys.load import read_export  # noqa: E402
from perftracker.collectors.traces.comm_kernels import cached_comm_kernels  # noqa: E402
from perftracker.collectors.traces.trace_map import parse_one  # noqa: E402

NAMES = ("sm90_xmma_gemm_bf16", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
         "void at::native::vectorized_elementwise_kernel<4>", "flash_fwd_kernel")


def _layout(kernels: int) -> list[tuple[int, int, int, str]]:
    """(step, kernel start ns, end ns, name): 10 us apart, 6 us long."""
    return [(i // 100, 1_000_000 + i * 10_000, 1_006_000 + i * 10_000, NAMES[i % len(NAMES)]) for i in range(kernels)]


def kineto_trace(path: Path, kernels: int) -> int:
    events = []
    for i, (step, start, end, name) in enumerate(_layout(kernels)):
        corr = i + 1
        if i % 100 == 0:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                           "ts": (start - 9_000) / 1000, "dur": 1_000_000 / 1000, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": (start - 8_000) / 1000, "dur": 5, "args": {}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": (start - 7_000) / 1000, "dur": 3, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start / 1000,
                       "dur": (end - start) / 1000, "args": {"stream": 7, "correlation": corr, "device": 0}})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}))
    return len(events)


def nsys_export(path: Path, kernels: int) -> int:
    conn = sqlite3.connect(path)
    pid = 100
    gpid, gtid = pid << 24, (pid << 24) | pid
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, "
                 "correlationId INT, globalPid INT, demangledName INT, shortName INT)")
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT, "
                 "correlationId INT, nameId INT, returnValue INT)")
    conn.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT, "
                 "text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT)")
    strings = {"cudaLaunchKernel_v7000": 1, "aten::mm, op_id = 1": 2, **{n: 10 + i for i, n in enumerate(NAMES)}}
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(v, k) for k, v in strings.items()])
    layout = _layout(kernels)
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, ?, ?)",
                     [(s, e, i + 1, gpid, strings[n], strings[n]) for i, (_, s, e, n) in enumerate(layout)])
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, 1, 0)",
                     [(s - 7_000, s - 4_000, gtid, i + 1) for i, (_, s, _e, _n) in enumerate(layout)])
    ranges = [(s - 8_000, s - 3_000, None, 2) for _, s, _e, _n in layout]
    ranges += [(s - 9_000, s - 9_000 + 1_000_000, f"ProfilerStep#{st}", None)
               for i, (st, s, _e, _n) in enumerate(layout) if i % 100 == 0]
    conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, ?, ?, NULL, ?, 0)",
                     [(a, b, t, gtid, tid) for a, b, t, tid in ranges])
    conn.commit()
    conn.close()
    return 3 * kernels + len(layout[::100])


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ck = cached_comm_kernels((), ())
    with tempfile.TemporaryDirectory() as folder:
        kjson, ndb = Path(folder) / "rank-0.pt.trace.json", Path(folder) / "rank_0.sqlite"
        n_kineto, n_nsys = kineto_trace(kjson, args.kernels), nsys_export(ndb, args.kernels)
        t_kineto = best(lambda: parse_one(kjson, None, ck), args.repeat)
        t_nsys = best(lambda: read_export(ndb, ck), args.repeat)
        got = read_export(ndb, ck)[0]
        assert got.events is not None and len(got.events) == n_nsys, (len(got.events or []), n_nsys)
        real = Path(folder) / "real.sqlite"
        real.write_bytes(lzma.decompress((ROOT / "tests/fixtures/nsys/nsysai_mfu_2gpu_before.sqlite.xz").read_bytes()))
        t_real = best(lambda: read_export(real, ck), args.repeat)
        n_real = sum(len(r.events) for r in read_export(real, ck) if r.events is not None)
        sizes = (kjson.stat().st_size, ndb.stat().st_size)
    load = os.getloadavg()[0]
    print(f"synthetic, {args.kernels:,} kernels; load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"  kineto .json  {n_kineto:>9,} events {sizes[0] / 1e6:7.1f} MB  {t_kineto:6.2f} s  "
          f"{n_kineto / t_kineto:>10,.0f} events/s")
    print(f"  nsys .sqlite  {n_nsys:>9,} events {sizes[1] / 1e6:7.1f} MB  {t_nsys:6.2f} s  "
          f"{n_nsys / t_nsys:>10,.0f} events/s")
    print(f"real export (nsys-ai mfu_2gpu_before, 2 ranks): {n_real:,} events in {t_real:.2f} s, "
          f"{n_real / t_real:,.0f} events/s")


if __name__ == "__main__":
    main()
