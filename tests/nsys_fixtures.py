"""Helpers of the Nsight Systems tests: the real exports of tests/fixtures/nsys (see SOURCES.md there),
decompressed, and small exports built per the documented schema (labelled synthetic where used)."""

from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"
MFU = "nsysai_mfu_2gpu_before.sqlite"  # real: 2 processes, 2 H100s, NCCL, autograd-nvtx (2026.2)
SAXPY = "pipit_saxpy_mpi_rank0.sqlite"  # real: 1 A100, MPI rank 0, NVTX (2022.2)
CLOVER = "pipit_cloverleaf_cuda.sqlite"  # real: 1 of 4 A100s, no NVTX (2024.5)


def real_export(name: str, folder: Path, as_name: str | None = None) -> Path:
    """The real export `name` decompressed into `folder` (as `as_name` when given)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / (as_name or name)
    with lzma.open(FIXTURES / f"{name}.xz") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def sql(path: Path, query: str, *args: object) -> list[tuple[object, ...]]:
    """Rows of `query` on the export, opened read-only (the ground truth the tests compare with)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def keep_process(src: Path, dst: Path, pid: int) -> Path:
    """A copy of the export `src` with only process `pid`'s activity rows (DERIVED from a real export:
    the per-rank file that `nsys profile -o rank_%q{RANK}` would have written for that process)."""
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        conn.execute(f"DELETE FROM {table} WHERE ((globalPid >> 24) & 16777215) != ?", (pid,))
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        conn.execute(f"DELETE FROM {table} WHERE ((globalTid >> 24) & 16777215) != ?", (pid,))
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    return dst


def synthetic_export(path: Path, kernels: list[tuple[int, int, str]], ranges: list[tuple[int, int, str]],
                     pid: int = 100, device: int = 0, env: str = "", columns_missing: tuple[str, ...] = ()) -> Path:
    """A SYNTHETIC export per the documented schema: kernels (start, end, name) on `device` of process `pid`,
    each launched by a cudaLaunchKernel 1 us before it, and NVTX push/pop ranges (start, end, text)."""
    conn = sqlite3.connect(path)
    gpid, gtid = pid << 24, (pid << 24) | pid
    kcols = [c for c in ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName",
                         "shortName") if c not in columns_missing]
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(f'{c} INTEGER' for c in kcols)})")
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, "
                 "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER)")
    conn.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, "
                 "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
                 "textId INTEGER, domainId INTEGER)")
    conn.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '')")
    conn.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, value TEXT)")
    conn.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, '', 'Hostname', 'node-a')")
    if env:
        conn.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, '', 'DeviceEnvironment', ?)", (env,))
    conn.execute("INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000')")
    ids: dict[str, int] = {}
    for corr, (start, end, name) in enumerate(kernels, start=1):
        sid = ids.setdefault(name, len(ids) + 10)
        conn.execute("INSERT OR IGNORE INTO StringIds VALUES (?, ?)", (sid, name))
        values = {"start": start, "end": end, "deviceId": device, "streamId": 7, "correlationId": corr,
                  "globalPid": gpid, "demangledName": sid, "shortName": sid}
        conn.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(kcols))})",
                     [values[c] for c in kcols])
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, 1, 0)",
                     (start - 1000, start - 500, gtid, corr))
    for start, end, text in ranges:
        conn.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, ?, ?, NULL, NULL, 0)",
                     (start, end, text, gtid))
    conn.commit()
    conn.close()
    return path


def add_nccl_init_payloads(path: Path, ranks: dict[int, tuple[int, int, int]], comm: int = 0x5EED) -> None:
    """Add to the (copied) export at `path` one NCCL communicator-init NVTX range per process, its payload
    blob laid out as Nsight 2026.2 writes one (32-byte header, then the fields at the offsets of the file's own
    schema 16777218: communicator id, No. of ranks, Rank, CUDA device): DERIVED, the schema real, the values
    made up. `ranks`: pid -> (rank, ranks, device)."""
    import struct

    conn = sqlite3.connect(path)
    for pid, (rank, size, device) in ranks.items():
        payload = struct.pack("<QiiiI", comm, size, rank, device, 0)
        blob = struct.pack("<IIIIQQ", 1, 0, 16777218, 0, len(payload), 32 + len(payload)) + payload
        gtid = (pid << 24) | pid
        conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, binaryData) "
                     "VALUES (60000000000, 60000001000, 59, 'ncclCommInitRankConfig', ?, 1, ?)", (gtid, blob))
    conn.commit()
    conn.close()


def shift_clock(path: Path, shift_ns: int) -> None:
    """Move every time of the export at `path` by `shift_ns` on its capture clock, the session start's clock
    reading with them (what the same capture on a host whose clock reads `shift_ns` later looks like): its
    UTC wall times are unchanged. DERIVED from a real export."""
    conn = sqlite3.connect(path)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        conn.execute(f"UPDATE {table} SET start = start + ?, end = end + ?", (shift_ns, shift_ns))
    conn.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET systemClockNs = systemClockNs + ?", (shift_ns,))
    conn.commit()
    conn.close()
