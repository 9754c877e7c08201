"""Read the NCCL RAS client's output (`ncclras`: text, JSON, monitor events) into the Store's `nccl_ras` table.

Promise: `load_ras(paths)` reads the files that hold RAS output (`is_ras_file`, by content) and returns one row
per thing RAS reported wrong or summarised (kinds: docs/internals/collectors.md). Nothing raises on content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import read_head, read_text
from perftracker.collectors.file_notes import sniffed_table
from perftracker.store import LoadNote

_SNIFF = 64 * 1024
_GROUP_ROW = re.compile(r"^\s*(?P<group>\d+)\s+(?P<comms>\d+)\s+(?P<nodes>\d+)\s+(?P<per_node>[\d-]+)\s+"
                        r"(?P<per_comm>\d+)\s+(?P<in_group>\d+)\s+(?P<status>[A-Z]+)\s+(?P<errors>[A-Z,]+)\s*$")
_PROCESS = re.compile(r"Process (?P<pid>\d+) on node (?P<host>\S+) managing GPUs? (?P<gpu>.{1,64}?)\s*$")
_RANK = re.compile(r"^\s*Rank (?P<rank>\d+) -- (?:GPU (?P<gpu>\S+) managed by process (?P<pid>\d+) on node "
                   r"(?P<host>\S+)|\[process information not found\])")
_MISSING_RANKS = re.compile(r"^\s*The missing ranks?: (?P<ranks>[\d, ]{1,4096})$")
_COMM = re.compile(r"^#\d+-\d+ \((?P<hash>[0-9a-f]{1,16})\) (?P<what>INCOMPLETE|ERROR|MISMATCH)")
_TIMEOUT = re.compile(r"Encountered (?P<n>\d+) communication timeouts?")
_MISMATCH_DETAIL = re.compile(r"^(?:Communicator ranks have|\d+ ranks? ha(?:ve|s) )")
_MAX_ROWS = 100_000


def is_ras_file(path: Path) -> bool:
    """True when the first 64 KB of `path` hold RAS client output (its tables, sections or JSON keys)."""
    head = read_head(path, _SNIFF)
    return (b"Group     Comms" in head or b"unreachable via the RAS network" in head or b"PEER_DEAD" in head
            or b"Missing communicator data from" in head or b"Communicator ranks have different" in head
            or (b'"communicators"' in head and b'"missing_ranks' in head))


def _row(file: str, line: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"file": file, "line": line, "kind": kind, "comm": fields.get("comm", ""), "rank": fields.get("rank", -1),
            "host": fields.get("host", ""), "pid": fields.get("pid", -1), "gpu": fields.get("gpu", ""),
            "status": fields.get("status", ""), "errors": fields.get("errors", ""), "detail": fields.get("detail", "")}


def _text(file: str, text: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    section, comm = "", ""
    for lineno, raw in enumerate(text.splitlines(), 1):
        if len(rows) >= _MAX_ROWS:
            break
        line = raw.rstrip()
        stripped = line.strip()
        g = _GROUP_ROW.match(line)
        if g is not None:
            rows.append(_row(file, lineno, "comm_group", status=g["status"], errors=g["errors"],
                             detail=f"group {g['group']}: {g['comms']} comms, {g['per_comm']} ranks per comm, "
                                    f"{g['nodes']} nodes"))
            continue
        c = _COMM.match(stripped)
        if c is not None:
            comm = "0x" + c["hash"].lstrip("0")
            section = c["what"]
            if section in ("ERROR", "MISMATCH"):
                rows.append(_row(file, lineno, "comm_error" if section == "ERROR" else "comm_mismatch", comm=comm))
            continue
        if stripped in ("DEAD", "INCOMPLETE", "TIMEOUT"):
            section, comm = stripped, ""
            continue
        p = _PROCESS.search(stripped)
        if p is not None and section in ("DEAD", "INCOMPLETE") and not comm:
            rows.append(_row(file, lineno, "dead" if section == "DEAD" else "missing_process", pid=int(p["pid"]),
                             host=p["host"], gpu=p["gpu"]))
            continue
        if p is not None and "PEER_DEAD" in stripped:
            rows.append(_row(file, lineno, "dead", pid=int(p["pid"]), host=p["host"], gpu=p["gpu"]))
            continue
        r = _RANK.match(line)
        if r is not None and comm and section == "INCOMPLETE":
            rows.append(_row(file, lineno, "missing_rank", comm=comm, rank=int(r["rank"]),
                             pid=int(r["pid"]) if r["pid"] else -1, host=r["host"] or "", gpu=r["gpu"] or ""))
            continue
        m = _MISSING_RANKS.match(line)
        if m is not None and comm:
            for part in m["ranks"].split(","):
                if part.strip().isdigit():
                    rows.append(_row(file, lineno, "missing_rank", comm=comm, rank=int(part)))
            continue
        t = _TIMEOUT.search(stripped)
        if t is not None:
            rows.append(_row(file, lineno, "timeout", detail=stripped))
            continue
        if comm and section == "MISMATCH" and _MISMATCH_DETAIL.match(stripped):
            rows[-1]["detail"] = (rows[-1]["detail"] + "; " if rows[-1]["detail"] else "") + stripped
    return rows


def _json(file: str, data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, dict):
        return []
    if data.get("event") == "PEER_DEAD" and isinstance(data.get("peer"), dict):
        peer = data["peer"]
        return [_row(file, -1, "dead", host=str(peer.get("host", "")), pid=int(peer.get("pid", -1)),
                     gpu=",".join(str(d) for d in peer.get("cuda_devs", [])))]
    rows: list[dict[str, Any]] = []
    for comm in data.get("communicators", [])[:_MAX_ROWS]:
        if not isinstance(comm, dict):
            continue
        name = str(comm.get("hash", ""))
        for rank in comm.get("ranks", []):
            status = rank.get("status", {}) if isinstance(rank, dict) else {}
            init, err = status.get("init_state", 0), status.get("async_error", 0)
            if init not in (0, 7) or err:
                rows.append(_row(file, -1, "comm_error", comm=name, rank=int(rank.get("rank", -1)),
                                 host=str(rank.get("host", "")), pid=int(rank.get("pid", -1)),
                                 gpu=str(rank.get("cuda_dev", "")), detail=f"init_state {init}, async_error {err}"))
        for rank in comm.get("missing_ranks", []):
            if not isinstance(rank, dict):
                continue
            status = rank.get("status", {}) if isinstance(rank.get("status"), dict) else {}
            kind = "dead" if status.get("considered_dead") else "missing_rank"
            rows.append(_row(file, -1, kind, comm=name, rank=int(rank.get("rank", -1)), host=str(rank.get("host", "")),
                             pid=int(rank.get("pid", -1)), gpu=str(rank.get("cuda_dev", "")),
                             detail="unresponsive" if status.get("unresponsive") else ""))
    return rows


def parse_ras_file(path: Path) -> list[dict[str, Any]]:
    """The `nccl_ras` rows of one file (text, JSON or monitor output). Raises InputError / OSError if unreadable."""
    text, _ = read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return _json(str(path), json.loads(stripped))
        except (ValueError, TypeError, AttributeError):
            rows: list[dict[str, Any]] = []
            for line in text.splitlines():  # monitor mode's JSON events, one object per line
                try:
                    rows.extend(_json(str(path), json.loads(line)))
                except (ValueError, TypeError, AttributeError):
                    continue
            if rows:
                return rows
    return _text(str(path), text)


def load_ras(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """The `nccl_ras` table of the files that hold RAS output, and notes about unreadable ones."""
    return sniffed_table("nccl_ras", "NCCL RAS output", paths, is_ras_file, parse_ras_file)
