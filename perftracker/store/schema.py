"""Column names and dtypes of every Store table, in one place.

Times are int64 ns on each rank's own clock; -1 marks "unknown" in integer columns. `conform` is where every row
enters the Store, and it never raises on a value (docs/internals/core.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from perftracker.values import ascii_int

# The columns of a sampled-stack profile table (profile_samples and baseline_profile_samples below).
_PROFILE_SAMPLE_COLUMNS: Mapping[str, str] = {
    "rank": "int32", "host": "string", "pid": "int64", "thread": "string", "main": "bool", "stack": "string",
    "count": "int64", "rate_hz": "float64", "duration_s": "float64", "file": "string",
}

TABLES: Mapping[str, Mapping[str, str]] = {
    # One row per trace event (complete 'X' events).
    "events": {
        "rank": "int32", "window": "int16", "device": "int16",
        "stream": "int32",  # -1 = CPU thread
        "tid": "int64",
        # compute | comm | memcpy | memset | sync | cpu_op | runtime | annotation | collective_cpu | gpu_annotation
        # | counter_range (CUPTI range-profiler counters in place of kernel events)
        "kind": "category", "name": "category", "start_ns": "int64", "dur_ns": "int64",
        "step": "int64",  # ProfilerStep number the event belongs to, -1 outside steps
        "correlation": "int64",  # launch <-> kernel link, -1 when absent
        "external_id": "int64",
        "collective": "category",  # allreduce, broadcast, ... for comm kernels and CPU collectives
        "bytes": "int64",  # message / copy size when the trace records it
        "pg": "category",  # process-group name
        "group_size": "int32",
        "seq": "int64",  # the collective's sequence number in its group (record_param_comms `Seq`), -1 unknown
        "peer": "int32",  # a send's destination / a recv's source, global rank (`Dst Rank` / `Src Rank`), -1
        # all-to-all split sizes as recorded ('[[in splits],[out splits]]' JSON text), '' where none
        "splits": "category",
        # the communication library of a comm kernel (data/comm_kernels.toml family: nccl, deepep, ...), else ''
        "comm_family": "category",
        # a framework op's arguments as the trace wrote them (JSON text; '' for other events and traces without
        # record_shapes): `Input Dims`, `Input type`, `Concrete Inputs` (analyzers/efficiency/ reads them)
        "input_dims": "category", "input_types": "category", "concrete_inputs": "category",
    },
    # One row per operation of a pipeline-parallel job recorded per worker (the OSDI'25 what-if artifact's
    # Parquet / Chrome-trace format, collectors/whatif_ops/): the what-if replay's input (analyzers/whatif/).
    "pipeline_ops": {
        "job": "category",  # the trial the records belong to (meta `trial_name`, else the file's stem)
        "rank": "int32", "dp_rank": "int32", "stage": "int32", "step": "int64",
        "optype": "category",  # forward-compute, backward-send, params-all-gather, optimizer, ...
        "start_ns": "int64",  # from the start of its step (the artifact rebases every step to 0)
        "dur_ns": "int64",
        "seq_id": "int32",  # order of the ops of one type in a step on a worker
        "mc": "int32",  # model chunk (virtual stage) within the stage; -1 for none
        "gmc": "int32",  # model chunk in the model
        "mb_id": "int32",  # micro-batch (forward / backward compute); -1 for others
    },
    # One row per training step per rank (from ProfilerStep#N or step files).
    "steps": {
        "rank": "int32", "window": "int16", "step": "int64", "start_ns": "int64", "dur_ns": "int64",
        "source": "category",  # profiler | stepfile
    },
    # Per-step phase timings from step files (forward, backward, optimizer, data, ...).
    "phases": {
        "rank": "int32", "step": "int64", "phase": "category", "dur_ns": "int64",
    },
    # One row per loaded trace window (a rank may have several profiling windows).
    "ranks": {
        "rank": "int32", "window": "int16", "host": "string", "file": "string", "world_size": "int32",
        "backend": "string", "device_name": "string",
        "base_ns": "int64",  # epoch ns of the trace's time zero when the trace says so, else -1
        "start_ns": "int64", "end_ns": "int64", "n_events": "int64",
    },
    "counters": {
        "host": "category", "rank": "int32", "device": "string", "port": "string", "name": "category",
        "ts_ns": "int64", "value": "float64",
    },
    # Ethernet interface and TCP counters of each host (collectors/counters/netdev.py): one row per
    # (host, iface, counter, sample); cumulative counters by their sysfs names (rx_bytes, tx_dropped,
    # carrier_changes, ...), gauges operstate_up / carrier / admin_up / speed_mbps / mtu, qdisc_* from
    # `tc -s qdisc`, and the host's TCP counters on iface "" as tcp:<name>.
    "netdev": {
        "host": "category", "iface": "string", "name": "category", "ts_ns": "int64", "value": "float64",
    },
    # The ranks' scheduler accounting (collectors/counters/sched.py): two snapshots per rank per window (an
    # incident's, or the watcher's healthy baseline: window "baseline"), summed over the process's threads.
    "cpu_sched": {
        "host": "string", "rank": "int32", "pid": "int64", "ts_ns": "int64", "run_ns": "int64",
        "wait_ns": "int64", "slices": "int64", "load1": "float64", "cpus": "int32", "window": "string",
    },
    # Each rank's main-thread scheduler state sampled through a window (collectors/counters/sched.py): one
    # row per rank per sample, every 50-100 ms of an incident's (or the baseline's: window "baseline") stack
    # recording; state is /proc/<pid>/stat's letter (R, S, D, T, t, ...).
    "proc_states": {
        "host": "string", "rank": "int32", "pid": "int64", "ts_ns": "int64", "state": "string",
        "window": "string",
    },
    # The interfaces those samples are of, per host: why the job uses each (a socket setting, the route
    # to a peer; "" unknown), the peers it reaches, its own addresses, the root qdisc kind last seen, the file.
    "net_ifaces": {
        "host": "string", "iface": "string", "why": "string", "peers": "string",
        "addresses": "string",  # the interface's own addresses, comma-separated
        "qdisc": "string", "source": "string",
    },
    # One row per configuration value seen: a captured process environment, an env file / job spec,
    # or an NCCL log's echo line. source: env | env_file | nccl_echo; evidence: file:line or "pid N".
    "config": {
        "rank": "int32", "host": "string", "pid": "int64", "key": "string", "value": "string",
        "source": "string", "evidence": "string",
    },
    # Facts parsed from NCCL_DEBUG logs, one row per distinct (process, key, value) with the line it
    # was first seen on and how often it repeated (collectors/nccl/log.py lists the keys; structured
    # values are JSON). pid -1: a fact printed outside a process header (bare version line).
    "nccl": {
        "rank": "int32", "host": "string", "pid": "int64", "device": "int32", "key": "string",
        "value": "string", "line": "int64", "file": "string", "count": "int64",
    },
    "stacks": {
        "rank": "int32", "host": "string", "pid": "int64", "ts_ns": "int64", "thread": "string",
        "frames": "string",  # JSON, innermost first: [[name, short file, line, file], ...] (store/stack_frames.py)
        # Added for hang diagnosis (collectors/stacks/snapshots.py): the snapshot folder the row came from
        # (stacks/<snapshot>/rank-<r>.json), the dump mode (nonblocking | blocking | native),
        # py-spy's "active" flag, the OS thread id, whether it is the rank's main thread.
        "snapshot": "string", "mode": "string", "active": "bool", "os_thread": "int64", "main": "bool",
        "world_size": "int32", "file": "string",
        # voluntary context switches of the rank's main thread when it was dumped (-1 unknown): a
        # blocked thread does not switch, a looping one does (analyzers/failures/stack_state.py `still`)
        "switches": "int64",
    },
    # Sampled stack profiles (collectors/stacks/samples.py): py-spy record's collapsed stacks, one row
    # per distinct (thread, stack) of a rank; stack is ';'-joined "function (file:line)", root first.
    "profile_samples": _PROFILE_SAMPLE_COLUMNS,
    # The healthy window `attach --watch` recorded when it armed (RUN/incidents/baseline-<host>/profiles/, copied into
    # each incident's evidence as baseline/profiles/): the same columns, compared with profile_samples (the
    # incident's window) by analyzers/online/baseline_shift.py.
    "baseline_profile_samples": _PROFILE_SAMPLE_COLUMNS,
    # Host devices the counter samples name (collectors/counters/inputs.py): one row per GPU
    # (device "gpu:<index>") or RDMA port (device "mlx5_0", port "1") per host, with what ties it
    # to ranks: PCI bus id, NUMA node (-1 unknown), GPU UUID, link layer and netdevs of a NIC, and
    # for a GPU the ranks NVML listed running on it (collectors/counters/gpu_samples.py).
    "devices": {
        "host": "string",
        "kind": "string",  # gpu | nic
        "device": "string", "port": "string", "uuid": "string", "pci_bus_id": "string", "numa_node": "int32",
        "link_layer": "string",
        "netdevs": "string",  # comma-separated
        "ranks": "string",  # comma-separated job ranks seen on a GPU, "" unknown
        "source": "string",  # the file it came from
    },
    # Flight-recorder entries of each rank (collectors/postmortem/flight_recorder.py): one row per recorded
    # collective. seq is the process group's collective sequence number (-1 for point-to-point
    # entries); sizes are JSON; started/completed are -1 when the backend never reports them (gloo).
    "collectives_fr": {
        "rank": "int32", "host": "string", "pg": "string", "pg_desc": "string", "seq": "int64",
        "op": "string", "input_sizes": "string", "output_sizes": "string", "dtypes": "string",
        "state": "string", "retired": "bool", "time_created_ns": "int64", "started_ns": "int64",
        "completed_ns": "int64", "timeout_ms": "int64", "file": "string",
        "p2p_seq": "int64",  # a point-to-point entry's p2p_seq_id (-1 for collectives)
    },
    # Operators of PyTorch / Chakra execution traces found beside the Kineto traces
    # (collectors/traces/execution_trace.py): rf_id is the record-function id, which the Kineto trace's
    # ops carry as "External id"; input_shapes / input_types are JSON text as the ET wrote them.
    "exec_ops": {
        "file": "string", "pid": "int64", "node_id": "int64", "rf_id": "int64", "name": "string",
        "input_shapes": "string", "input_types": "string",
    },
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
    # The throughput a job's own log reports (formats/framework_throughput.py): TFLOP/s per GPU and MFU as
    # Megatron, torchtitan or NeMo print them, one row per line (NaN where the line has no such figure).
    "reported_throughput": {
        "rank": "int32", "step": "int64", "tflops": "float64", "mfu_pct": "float64", "source": "string",
        "file": "string", "line": "int64",
    },
    # Failures read from job output and launcher logs, torchelastic error files and kernel logs
    # (collectors/postmortem/joblogs.py). kind: timeout (NCCL watchdog) | gloo_timeout | exception | exit | xid.
    # ts_ns: epoch ns when the line says (-1 unknown); rank -1 when no rank is known.
    "failures": {
        "rank": "int32", "host": "string", "kind": "string", "ts_ns": "int64", "pg": "string", "seq": "int64",
        "op": "string", "numel": "int64", "message": "string", "file": "string", "line": "int64",
    },
}


def empty_table(name: str) -> pd.DataFrame:
    """An empty DataFrame with the table's columns and dtypes (a copy of one made once: every Store makes every
    table, and building one column by column costs ~30x the copy)."""
    return _empty_template(name).copy()


@functools.cache
def _empty_template(name: str) -> pd.DataFrame:
    columns = TABLES[name]  # arrays, not Series: no index to align
    return pd.DataFrame({col: pd.array([], dtype=dtype) for col, dtype in columns.items()},  # type: ignore[call-overload]
                        index=pd.RangeIndex(0))


@functools.cache
def _pandas_dtype(dtype: str) -> object:
    return pd.api.types.pandas_dtype(dtype)


def conform(name: str, frame: pd.DataFrame, problems: list[str] | None = None) -> pd.DataFrame:
    """Return `frame` with exactly the table's columns (missing ones filled) in the schema's dtypes.

    Values a column cannot hold are replaced (see the module docstring) and, when `problems` is given,
    listed there as "<table>.<column>: N value(s) ...".
    """
    columns = TABLES[name]
    out: dict[str, pd.Series] = {}  # built at once: inserting column by column costs ~ms each (the reduce conforms every trace)
    for col, dtype in columns.items():
        if col in frame.columns:
            series, replaced = _fit(frame[col], dtype)
            if replaced and problems is not None:
                what = "-1 (unknown)" if dtype.startswith("int") else "NaN"
                problems.append(f"{name}.{col}: {replaced} value(s) out of range or not numbers, stored as {what}")
        else:  # missing: the column's "unknown"
            series = pd.Series(-1 if dtype.startswith("int") else float("nan") if dtype == "float64" else "",
                               index=frame.index)
        # astype only where the dtype differs (a categorical stays as it is: astype("category") would copy it)
        same = series.dtype == _pandas_dtype(dtype) or (dtype == "category" and series.dtype.name == "category")
        out[col] = series if same else series.astype(dtype)  # type: ignore[call-overload]
    return pd.DataFrame({col: series.array for col, series in out.items()}, columns=list(columns))  # index 0..n-1


_INT_BOUNDS = {"int64": (-(2**63), 2**63 - 1), "int32": (-(2**31), 2**31 - 1), "int16": (-(2**15), 2**15 - 1)}


def _fit(series: pd.Series, dtype: str) -> tuple[pd.Series, int]:
    """`series` with the values `dtype` cannot hold replaced, and how many were."""
    if dtype in _INT_BOUNDS:
        return _fit_ints(series, *_INT_BOUNDS[dtype])
    if dtype != "float64":
        return series, 0
    bad = 0
    if not pd.api.types.is_float_dtype(series.dtype):
        numbers = pd.to_numeric(series, errors="coerce") if not pd.api.types.is_bool_dtype(series.dtype) \
            else series.astype("float64")
        bad = int((numbers.isna() & series.notna()).sum())
        series = numbers.astype("float64")
    infinite = np.isinf(series.to_numpy(dtype="float64", na_value=np.nan))
    if infinite.any():
        series = series.mask(infinite)
    return series, bad + int(infinite.sum())


def _fit_ints(series: pd.Series, lo: int, hi: int) -> tuple[pd.Series, int]:
    kind = series.dtype.kind
    if kind in "iu":
        if series.empty or (int(series.min()) >= lo and int(series.max()) <= hi):
            return series, 0
        outside = (series < lo) | (series > hi)
        return series.mask(outside, -1), int(outside.sum())
    if kind == "b":
        return series.astype("int64"), 0
    if kind == "f":
        values = series.to_numpy(dtype="float64", na_value=np.nan)
        ok = np.isfinite(values) & (values >= float(lo)) & (values < float(hi) + 1.0)
        fitted = pd.Series(np.where(ok, np.nan_to_num(values), -1).astype(np.int64), index=series.index)
        return fitted, int((~ok & ~np.isnan(values)).sum())
    cells = [_int_cell(v, lo, hi) for v in series.tolist()]
    bad = sum(1 for v, c in zip(series.tolist(), cells) if c is None and v is not None and v is not pd.NA
              and not (isinstance(v, float) and math.isnan(v)))
    return pd.Series([-1 if c is None else c for c in cells], index=series.index, dtype="int64"), bad


def _int_cell(value: object, lo: int, hi: int) -> int | None:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        number = int(value)
        return number if lo <= number <= hi else None
    if isinstance(value, (float, np.floating)):
        number_f = float(value)
        return int(number_f) if math.isfinite(number_f) and lo <= number_f < hi + 1.0 else None
    if isinstance(value, str):
        return ascii_int(value.strip(), lo, hi)
    return None
