"""NCCL's NVTX payloads in an export: which rank of how many each process is, from its communicators.

Promise: `payload_ranks(export)` decodes the typed payloads NCCL attaches to its ranges with the file's own
schemas and returns, per process id, the rank and rank count of its largest communicator, plus a note when
payloads are absent; a blob that does not fit its schema is skipped. Layout: docs/internals/collectors.md.
"""

from __future__ import annotations

import sqlite3
import struct
from dataclasses import dataclass, field

from perftracker.collectors.nsys.database import Export
from perftracker.values import MAX_RANK

_HEADER = struct.Struct("<IIIIQQ")
_WIDTH = {5: 4, 6: 4, 15: 4, 16: 4, 7: 8, 8: 8, 9: 8, 10: 8, 17: 8, 18: 8, 22: 8}  # NVTX payload entry types
_SIGNED = {5, 15, 7, 9, 17}
_MAX_BLOBS = 200_000
_PID = 24


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
        pid = (gtid >> _PID) & 0xFFFFFF
        if size > out.ranks.get(pid, (-1, 0))[1]:
            out.ranks[pid] = (rank, size)
    return out
