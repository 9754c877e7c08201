"""Nsight Systems inputs read into one `FileResult` per rank, for the loader's reduce step.

Promise: `read_nsys_inputs(found, comm_kernels, step_name)` reads the exports and reports the input kinds found
(a report exported into a temporary folder when `nsys` is on PATH, else a note says how; nothing is written next
to the inputs); `read_export(path, ...)` gives a `FileResult` per rank (each CUDA device of each process with GPU
activity), its rank from NCCL's NVTX payloads (`payload_ranks`), the recorded environment, the file name or the
loader (`rank_source` says which); a file that cannot be read is one FileResult that is not ok.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import struct
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from perftracker.collectors.nsys.database import (
    Export,
    ExportError,
    TableSpec,
    open_export,
    read_table,
    scalar_rows,
    time_budget,
)
from perftracker.collectors.nsys.ranks_of import RankSplit, split_ranks
from perftracker.collectors.traces.comm_kernels import CommKernels
from perftracker.collectors.traces.ranks import rank_from_name
from perftracker.collectors.traces.trace_map import FileResult, TraceFacts, compact_pg_config
from perftracker.values import MAX_RANK, ascii_int

_GPU = {"start": ("start",), "end": ("end",), "device": ("deviceId",), "stream": ("streamId",),
        "correlation": ("correlationId",), "gpid": ("globalPid",)}
SPECS = {
    "kernel": TableSpec("CUPTI_ACTIVITY_KIND_KERNEL", {**_GPU, "name": ("demangledName", "shortName")}),
    "graph": TableSpec("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", {**_GPU, "graph": ("graphId",)}),
    "memcpy": TableSpec("CUPTI_ACTIVITY_KIND_MEMCPY", {**_GPU, "bytes": ("bytes",), "copy": ("copyKind",)}),
    "memset": TableSpec("CUPTI_ACTIVITY_KIND_MEMSET", {**_GPU, "bytes": ("bytes",)}),
    "sync": TableSpec("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {**_GPU, "sync": ("syncType",)}),
    "runtime": TableSpec("CUPTI_ACTIVITY_KIND_RUNTIME", {
        "start": ("start",), "end": ("end",), "gtid": ("globalTid",), "correlation": ("correlationId",),
        "name": ("nameId",)}),
    "nvtx": TableSpec("NVTX_EVENTS", {
        "start": ("start",), "end": ("end",), "type": ("eventType",), "gtid": ("globalTid",),
        "textId": ("textId",), "domain": ("domainId",)}, text="text",
        where="eventType IN (59, 60, 70)"),  # the range types (ranks_of.NVTX_RANGE_TYPES); marks have no end
}
_REPORTS = (".nsys-rep", ".qdrep")
_RANK_ENV = re.compile(r"(?:^|;)RANK=(\d{1,9})(?:;|$)")


def read_nsys_inputs(found: list[Path], comm_kernels: CommKernels, step_name: str = "") -> list[FileResult]:
    """FileResults of the Nsight Systems inputs `found` (exports and reports), one per rank."""
    if not found:
        return []
    exports = {p.with_suffix("") for p in found if p.name.lower().endswith(".sqlite")}
    results: list[FileResult] = []
    for path in found:
        if not path.name.lower().endswith(_REPORTS):
            results.extend(read_export(path, comm_kernels, step_name))
        elif Path(str(path)[: -len(path.suffix)]) in exports:
            continue  # its export lies beside it and is read
        else:
            results.extend(_export_and_read(path, comm_kernels, step_name))
    return results


def _export_and_read(report: Path, comm_kernels: CommKernels, step_name: str) -> list[FileResult]:
    nsys = shutil.which("nsys")
    how = f"nsys export --type sqlite -o {report.with_suffix('.sqlite')} {report}"
    if nsys is None:
        return [FileResult(str(report), False, error=f"{report}: an Nsight Systems report, and `nsys` is not on "
                           f"PATH to export it; export it where Nsight Systems is installed ({how}) and put the "
                           ".sqlite beside it")]
    with tempfile.TemporaryDirectory(prefix="perftracker-nsys-") as folder:
        out = Path(folder) / (report.stem + ".sqlite")
        try:
            done = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
                                   str(out), str(report)], capture_output=True, timeout=time_budget(), check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return [FileResult(str(report), False, error=f"{report}: `nsys export` failed ({exc}); run {how}")]
        if done.returncode != 0 or not out.is_file():
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            return [FileResult(str(report), False, error=f"{report}: `nsys export` exited {done.returncode} "
                               f"({tail[0][:200]}); run {how}")]
        results = read_export(out, comm_kernels, step_name)
    for r in results:  # the inputs are the report, not the temporary export
        r.path = str(report)
        r.error = r.error.replace(str(out), str(report))
    return results


@dataclass(frozen=True)
class ExportInfo:
    """Facts of the capture as a whole."""

    host: str
    base_ns: int  # UTC epoch ns of the capture clock's zero, -1 unknown
    env_rank: int | None  # RANK= of the profiled command's environment
    version: str  # Nsight Systems version that exported it
    devices: dict[int, str]  # CUDA device -> GPU name (TARGET_INFO_GPU)


def read_export(path: Path, comm_kernels: CommKernels, step_name: str = "") -> list[FileResult]:
    """One FileResult per rank of the export at `path` (one failed FileResult when it cannot be read)."""
    try:
        export = open_export(path)
    except ExportError as exc:
        return [FileResult(str(path), False, error=str(exc))]
    try:
        info = _export_info(export)
        rows = {key: read_table(export, spec) for key, spec in SPECS.items()}
        split = split_ranks(export, rows, comm_kernels, step_name)
        payload = payload_ranks(export)
    except ExportError as exc:
        return [FileResult(str(path), False, error=str(exc))]
    finally:
        export.close()
    notes: list[tuple[str, dict[str, object]]] = [(n, {}) for r in rows.values() for n in r.notes]
    notes += [(n, {}) for n in split.notes]
    if not split.ranks:
        return [FileResult(str(path), False, error=f"{path}: an Nsight Systems export with no GPU activity "
                           "(no kernels, copies or sets); profile with `nsys profile -t cuda,nvtx`")]
    notes += [(n, {"info": True}) for n in payload.notes]
    return _results(path, info, split, notes, payload)


def _results(path: Path, info: ExportInfo, split: RankSplit, notes: list[tuple[str, dict[str, object]]],
             payload: PayloadRanks) -> list[FileResult]:
    several = len(split.ranks) > 1
    per_pid = Counter(one.pid for one in split.ranks)
    name_rank = rank_from_name(path)
    rank_note = ""
    results = []
    for i, one in enumerate(split.ranks):
        rank, source, world = None, "assigned", -1
        if one.pid in payload.ranks and per_pid[one.pid] == 1:
            (rank, world), source = payload.ranks[one.pid], "nccl"
        elif not several and info.env_rank is not None:
            rank, source = info.env_rank, "environment"
        elif not several and name_rank is not None:
            rank, source = name_rank, "filename"
        elif several and not rank_note:
            rank_note = (f"{len(split.ranks)} ranks, one per CUDA device of each process "
                         f"({', '.join(r.label for r in split.ranks)}); no NCCL payload or RANK says which is "
                         "which, so they take the next free ranks in this order")
        events, steps = one.events, one.steps
        facts = TraceFacts(
            rank=rank, rank_source=source, host=info.host, world_size=world,
            backend="nccl" if (events["comm_family"].astype(str) == "nccl").any() else "",
            device_name=info.devices.get(one.device, ""), base_ns=info.base_ns,
            start_ns=int(events["start_ns"].min()) if len(events) else 0,
            end_ns=int((events["start_ns"] + events["dur_ns"]).max()) if len(events) else 0,
            n_events=len(events), pg_config=compact_pg_config(None))
        mine = [*notes] if i == 0 else []
        if not several or source == "nccl":
            said = f"rank {rank} of {world} (from NCCL's payload)" if source == "nccl" else (
                f"rank {rank} (from the {'recorded RANK' if source == 'environment' else 'file name'})"
                if rank is not None else "the next free rank (no NCCL payload, no RANK recorded, none in the file name)")
            mine.append((f"Nsight Systems export (Nsight {info.version or 'version unknown'}): {one.label} is {said}",
                         {"nsys": True, "info": True}))
        elif i == 0:
            mine.append((f"Nsight Systems export (Nsight {info.version or 'version unknown'}) holding {rank_note}",
                         {"nsys": True, "info": True}))
        results.append(FileResult(str(path), True, facts=facts, notes=mine, events=events, steps=steps))
    return results


def _export_info(export: Export) -> ExportInfo:
    env = {str(k): str(v) for k, v in scalar_rows(export, "TARGET_INFO_SYSTEM_ENV", ("name", "value"))
           if isinstance(k, str)}
    start = scalar_rows(export, "TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "systemClockNs"), 1)
    base = -1
    if start and isinstance(start[0][0], int) and start[0][0] > 0:
        clock = start[0][1] if isinstance(start[0][1], int) and start[0][1] >= 0 else 0
        base = int(start[0][0]) - int(clock)
    match = _RANK_ENV.search(env.get("DeviceEnvironment", ""))
    env_rank = ascii_int(match.group(1), 0, MAX_RANK) if match else None
    meta = [*scalar_rows(export, "META_DATA_EXPORT", ("name", "value")),
            *scalar_rows(export, "EXPORT_META_DATA", ("name", "value"))]
    version = next((str(v) for k, v in meta if k == "EXPORT_PRODUCT_VERSION"), "")
    devices: dict[int, str] = {}
    for cu, ident, name in scalar_rows(export, "TARGET_INFO_GPU", ("cuDevice", "id", "name"), 4096):
        key = cu if isinstance(cu, int) else ident
        if isinstance(key, int) and isinstance(name, str):
            devices.setdefault(key, name)
    return ExportInfo(env.get("Hostname", "")[:256], base, env_rank, version[:64], devices)


_HEADER = struct.Struct("<IIIIQQ")
_WIDTH = {5: 4, 6: 4, 15: 4, 16: 4, 7: 8, 8: 8, 9: 8, 10: 8, 17: 8, 18: 8, 22: 8}  # NVTX payload entry types
_SIGNED = {5, 15, 7, 9, 17}
_MAX_BLOBS = 200_000


@dataclass
class PayloadRanks:
    ranks: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (rank, ranks in its largest comm)
    notes: list[str] = field(default_factory=list)


def _schemas(export: Export) -> dict[int, list[tuple[str, int, int]]]:
    """schema id -> [(field name, type, offset)] of the schemas naming a rank."""
    if not (export.has("NVTX_PAYLOAD_SCHEMA_ENTRIES", "schemaId", "type", "name", "offset")):
        return {}
    found: dict[int, list[tuple[str, int, int]]] = {}
    for sid, ftype, name, offset in export.conn.execute(
            'SELECT schemaId, "type", name, "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES LIMIT 10000'):
        if isinstance(sid, int) and isinstance(ftype, int) and isinstance(name, str):
            entry = (name, ftype, offset if isinstance(offset, int) and 0 <= offset < 4096 else 0)
            if entry not in found.setdefault(sid, []):
                found[sid].append(entry)
    return {s: f for s, f in found.items() if {"Rank", "No. of ranks"} <= {n for n, _, _ in f}}


def _field(blob: bytes, ftype: int, offset: int) -> int | None:
    width = _WIDTH.get(ftype)
    at = _HEADER.size + offset
    if width is None or at + width > len(blob):
        return None
    return int.from_bytes(blob[at:at + width], "little", signed=ftype in _SIGNED)


def payload_ranks(export: Export) -> PayloadRanks:
    """The rank of each process NCCL's payloads name (see the module's promise)."""
    out = PayloadRanks()
    if not export.has("NVTX_EVENTS", "binaryData", "globalTid"):
        return out
    try:
        schemas = _schemas(export)
        if not schemas:
            return out
        rows = export.conn.execute("SELECT globalTid, binaryData FROM NVTX_EVENTS WHERE typeof(binaryData) = 'blob' "
                                   f"AND typeof(globalTid) = 'integer' LIMIT {_MAX_BLOBS}").fetchall()
    except sqlite3.Error:
        out.notes.append("NCCL's NVTX payloads could not be read; ranks are taken from RANK or the file name")
        return out
    if not rows:
        out.notes.append("NCCL's NVTX payload schemas are there but no payload values (export with "
                         "`nsys export --include-blobs=true` to keep them); ranks are taken from RANK or the file name")
        return out
    for gtid, blob in rows:
        if len(blob) < _HEADER.size:
            continue
        schema = _HEADER.unpack_from(blob)[2]
        fields = {name: _field(blob, ftype, offset) for name, ftype, offset in schemas.get(schema, [])}
        rank, size = fields.get("Rank"), fields.get("No. of ranks")
        if rank is None or size is None or not 0 <= rank < size <= MAX_RANK + 1:
            continue
        pid = (gtid >> 24) & 0xFFFFFF  # globalTid: the process id in bits 24..47
        if size > out.ranks.get(pid, (-1, 0))[1]:
            out.ranks[pid] = (rank, size)
    return out
