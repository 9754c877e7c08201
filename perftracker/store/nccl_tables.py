"""The Store tables NCCL's own outputs fill (Inspector records, nccl-tests tables, the RAS client), with their
columns and dtypes; `schema.TABLES` holds them with every other table.
"""

from __future__ import annotations

from collections.abc import Mapping

NCCL_TABLES: dict[str, Mapping[str, str]] = {
    # Per-collective records of NCCL's Inspector profiler plugin (collectors/nccl/inspector.py), one row per
    # (process, communicator, collective or p2p op). rank: the process's global rank (its rank in the largest
    # communicator it belongs to); comm_rank / comm_size its place in this communicator. dur_ns is NCCL's
    # exec time (the slowest channel's kernel on the GPU for timing kernel_gpu), algbw/busbw in GB/s as NCCL
    # computed them; dump_ns the epoch time the line was written, start_ns the op's start (verbose output
    # only, else -1). kind: coll | p2p; peer: the p2p peer (-1 for collectives).
    "nccl_collectives": {
        "rank": "int32", "host": "category", "pid": "int64", "comm_id": "category", "comm_name": "category",
        "comm_rank": "int32", "comm_size": "int32", "nnodes": "int32", "kind": "category", "op": "category",
        "seq": "int64", "peer": "int32", "bytes": "int64", "dur_ns": "int64", "algbw_gbs": "float64",
        "busbw_gbs": "float64", "timing": "category", "dump_ns": "int64", "start_ns": "int64",
        "file": "string",
    },
    # nccl-tests output (collectors/nccl/nccl_tests.py): one row per message size of each test's table. oop_* /
    # ip_*: out-of-place / in-place time (us), algbw and busbw (GB/s), #wrong (-1: N/A). root -1: none printed.
    # test: all_reduce_perf, ... ("" unknown); avg_busbw: the test's "# Avg bus bandwidth" (NaN if absent);
    # nranks / hosts / gpus: its "Using devices" lines (-1 / "" if absent).
    "nccl_tests": {
        "file": "string", "line": "int64", "test": "string", "test_index": "int32", "size_bytes": "int64",
        "count": "int64", "dtype": "string", "redop": "string", "root": "int32", "oop_time_us": "float64",
        "oop_algbw": "float64", "oop_busbw": "float64", "oop_wrong": "int64", "ip_time_us": "float64",
        "ip_algbw": "float64", "ip_busbw": "float64", "ip_wrong": "int64", "avg_busbw": "float64",
        "nranks": "int32", "hosts": "string", "gpus": "string",
    },
    # The NCCL RAS client's output (collectors/nccl/ras.py): one row per thing it reports. kind: comm_group | dead |
    # missing_process | missing_rank | comm_error | comm_mismatch | timeout; comm: the communicator hash ("0x..", the
    # commId of NCCL's Init lines) or ""; rank the communicator rank, pid / host / gpu the process (-1 / "" unknown).
    "nccl_ras": {
        "file": "string", "line": "int64", "kind": "string", "comm": "string", "rank": "int32",
        "host": "string", "pid": "int64", "gpu": "string", "status": "string", "errors": "string",
        "detail": "string",
    },
}
