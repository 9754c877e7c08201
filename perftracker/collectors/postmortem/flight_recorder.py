"""Read PyTorch Flight Recorder (FR) dumps without trusting them.

Promise: `load_fr_dumps(paths)` reads FR dumps as JSON (`_dump_fr_trace_json()`, one file per rank)
or as pickle (`_dump_fr_trace()`, the files `TORCH_FR_DUMP_TEMP_FILE` / `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`
name `<prefix><rank>`) and returns the `collectives_fr` table, per-rank `pg_status`/`pg_config` for
the Store's `RunInfo`, and notes. Pickles are NEVER unpickled: `plain_unpickle` walks the opcodes with
`pickletools.genops` and rebuilds only plain data (dict, list, tuple, set, str, bytes, int, float,
bool, None). A pickle with any code reference (GLOBAL, REDUCE, BUILD, ...) is refused with a note,
so a crafted file cannot run anything. The rank comes from a `rank` key when present, else from the
file name's trailing number (`rank_3`, `nccl_trace_rank_3`, `fr-3.json`). Point-to-point entries get
seq -1 (their collective sequence number does not advance).
"""

from __future__ import annotations

import json
import pickletools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform, empty_table

MAX_DUMP_BYTES = 1 << 30
_MARK = object()
_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z]+)*$")
_PLAIN_LEAF = {
    "BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4", "BINFLOAT", "FLOAT",
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING",
    "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8",
}


class UnsafePickle(ValueError):
    """The pickle holds something other than plain data (a code reference); it was not loaded."""


def _pop_mark(stack: list[Any]) -> list[Any]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1:]
            del stack[i:]
            return items
    raise ValueError("pickle: MARK expected")


def plain_unpickle(data: bytes) -> Any:
    """Rebuild the plain data a pickle describes, without importing or calling anything.

    Raises UnsafePickle on any opcode that would reference code (GLOBAL, STACK_GLOBAL, REDUCE,
    BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID, ...) and ValueError on a malformed stream."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    try:
        ops = list(pickletools.genops(data))
    except Exception as exc:  # pickletools raises ValueError and others on garbage
        raise ValueError(f"not a pickle stream ({exc})") from None
    for op, arg, _pos in ops:
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            if len(stack) != 1:
                raise ValueError("pickle: unbalanced stack at STOP")
            return stack[0]
        if name in _PLAIN_LEAF:
            stack.append(arg)
        elif name == "NONE":
            stack.append(None)
        elif name in ("NEWTRUE", "NEWFALSE"):
            stack.append(name == "NEWTRUE")
        elif name == "MARK":
            stack.append(_MARK)
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "EMPTY_SET":
            stack.append(set())
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = stack[-n:]
            del stack[-n:]
            stack.append(tuple(items))
        elif name == "TUPLE":
            stack.append(tuple(_pop_mark(stack)))
        elif name == "LIST":
            stack.append(_pop_mark(stack))
        elif name == "DICT":
            items = _pop_mark(stack)
            stack.append(dict(zip(items[0::2], items[1::2])))
        elif name == "FROZENSET":
            stack.append(frozenset(_pop_mark(stack)))
        elif name == "APPEND":
            value = stack.pop()
            stack[-1].append(value)
        elif name == "APPENDS":
            items = _pop_mark(stack)
            stack[-1].extend(items)
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            stack[-1][key] = value
        elif name == "SETITEMS":
            items = _pop_mark(stack)
            for k, v in zip(items[0::2], items[1::2]):
                stack[-1][k] = v
        elif name == "ADDITEMS":
            items = _pop_mark(stack)
            stack[-1].update(items)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(str(arg))] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[int(str(arg))])
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            _pop_mark(stack)
        elif name == "DUP":
            stack.append(stack[-1])
        else:
            raise UnsafePickle(f"contains code references ({name}); not loaded")
    raise ValueError("pickle: no STOP opcode")


def looks_like_fr_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def looks_like_fr_json(head: bytes) -> bool:
    text = head[:65536]
    return text.lstrip()[:1] == b"{" and b'"entries"' in text and (
        b'"pg_config"' in text or b'"pg_status"' in text or b'"collective_seq_id"' in text)


def is_fr_dump(path: Path) -> bool:
    """Cheap sniff: a JSON FR dump, or a pickle (checked in full when loaded)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return False
    return looks_like_fr_json(head) or looks_like_fr_pickle(head)


def read_fr_dump(path: Path) -> dict[str, Any]:
    """The dump as plain data. Raises UnsafePickle / ValueError / OSError."""
    size = path.stat().st_size
    if size > MAX_DUMP_BYTES:
        raise ValueError(f"{size} bytes is more than a flight-recorder dump should be")
    data = path.read_bytes()
    if looks_like_fr_pickle(data[:2]):
        dump = plain_unpickle(data)
    else:
        dump = json.loads(data.decode("utf-8", errors="replace"))
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise ValueError("not a flight-recorder dump (no 'entries' list)")
    return dump


def _int(value: Any, default: int = -1) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (str, float)):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _rank_of(path: Path, dump: dict[str, Any]) -> int:
    if isinstance(dump.get("rank"), int):
        return int(dump["rank"])
    match = _TRAILING_NUMBER.search(path.name)
    return int(match.group(1)) if match else -1


def _rows(dump: dict[str, Any], rank: int, file: str) -> list[dict[str, Any]]:
    rows = []
    for e in dump.get("entries") or []:
        if not isinstance(e, dict):
            continue
        group = e.get("process_group") or ("", "")
        pg = str(group[0]) if isinstance(group, (list, tuple)) and group else str(e.get("pg_id", ""))
        desc = str(group[1]) if isinstance(group, (list, tuple)) and len(group) > 1 else ""
        started, completed = _int(e.get("time_discovered_started_ns")), _int(e.get("time_discovered_completed_ns"))
        dtypes = e.get("input_dtypes") or []
        rows.append({
            "rank": rank, "host": str(dump.get("host", "")), "pg": pg, "pg_desc": desc,
            "seq": -1 if e.get("is_p2p") else _int(e.get("collective_seq_id")),
            "op": str(e.get("profiling_name", "")),
            "input_sizes": json.dumps(e.get("input_sizes"), separators=(",", ":")),
            "output_sizes": json.dumps(e.get("output_sizes"), separators=(",", ":")),
            "dtypes": ",".join(str(d) for d in dtypes) if isinstance(dtypes, (list, tuple)) else str(dtypes),
            "state": str(e.get("state", "")), "retired": bool(e.get("retired", False)),
            "time_created_ns": _int(e.get("time_created_ns")),
            "started_ns": started if started > 0 else -1, "completed_ns": completed if completed > 0 else -1,
            "timeout_ms": _int(e.get("timeout_ms")), "file": file,
        })
    return rows


def _status(raw: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    if isinstance(raw, dict):
        for pg, status in raw.items():
            if isinstance(status, dict):
                out[str(pg)] = {str(k): _int(v) for k, v in status.items()}
    return out


def load_fr_dumps(paths: Sequence[Path]) -> tuple[pd.DataFrame, RunInfo, list[LoadNote]]:
    """(collectives_fr table, RunInfo {fr_pg_status: {rank: {pg: status}}, fr_pg_config: {pg: {...}}}, notes)."""
    rows: list[dict[str, Any]] = []
    status: dict[str, dict[str, dict[str, int]]] = {}
    config: dict[str, dict[str, Any]] = {}
    notes: list[LoadNote] = []
    for path in paths:
        try:
            dump = read_fr_dump(path)
        except UnsafePickle as exc:
            notes.append(LoadNote("error", str(path), f"flight-recorder pickle {exc}: only plain data is read "
                                  "from dumps (perftracker never unpickles untrusted files)"))
            continue
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            notes.append(LoadNote("warning", str(path), f"not a readable flight-recorder dump ({exc})"))
            continue
        rank = _rank_of(path, dump)
        if rank < 0:
            notes.append(LoadNote("warning", str(path), "flight-recorder dump without a rank (no 'rank' key, no "
                                  "number at the end of the file name); its entries are kept as rank -1"))
        rows.extend(_rows(dump, rank, str(path)))
        status[str(rank)] = _status(dump.get("pg_status"))
        for pg, cfg in (dump.get("pg_config") or {}).items() if isinstance(dump.get("pg_config"), dict) else []:
            if isinstance(cfg, dict) and str(pg):
                config.setdefault(str(pg), {k: (str(v) if not isinstance(v, (int, list)) else v)
                                            for k, v in cfg.items()})
    frame = conform("collectives_fr", pd.DataFrame(rows)) if rows else empty_table("collectives_fr")
    return frame, RunInfo(fr_pg_status=status, fr_pg_config=config) if status else RunInfo(), notes


