"""Read PyTorch Flight Recorder (FR) dumps without trusting them.

Promise: `load_fr_dumps(paths)` reads FR dumps (JSON or pickle) into the `collectives_fr` table, per-rank
`pg_status` / `pg_config` and notes. Pickles are NEVER unpickled: `plain_unpickle` rebuilds only plain data and
refuses any code reference. Ranks and duplicates: docs/internals/collectors.md.
"""

from __future__ import annotations

import json
import math
import pickletools
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import clean_text, loads_json, read_capped
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform, empty_table
from perftracker.values import MAX_RANK, ascii_int, loose_int, rank_in_range

MAX_DUMP_BYTES = 1 << 30
# Bounds of the opcode walk: a real dump (a few thousand entries of small dicts) is far below all of them.
MAX_STACK = 1 << 20  # items on the pickle stack at once
MAX_MEMO = 1 << 20  # memo slots
MAX_OBJECTS = 1 << 20  # objects in the rebuilt value, each shared reference counted where it is used
MAX_DEPTH = 64  # nesting of the rebuilt value
_MARK = object()
_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z]+)*$")
_PLAIN_LEAF = {
    "BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4", "BINFLOAT", "FLOAT",
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING",
    "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8",
}
_NEW: dict[str, Callable[[], Any]] = {  # the opcodes that push a constant or a new empty container
    "NONE": lambda: None, "NEWTRUE": lambda: True, "NEWFALSE": lambda: False, "MARK": lambda: _MARK,
    "EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple, "EMPTY_SET": set,
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


def _pop(stack: list[Any]) -> Any:
    if not stack or stack[-1] is _MARK:
        raise ValueError("pickle: stack underflow")
    return stack.pop()


def _top(stack: list[Any], kind: type | tuple[type, ...]) -> Any:
    if not stack or not isinstance(stack[-1], kind):
        raise ValueError(f"pickle: expected a {getattr(kind, '__name__', 'container')} on the stack")
    return stack[-1]


def _pairs(items: list[Any]) -> dict[Any, Any]:
    return dict(zip(items[0::2], items[1::2]))


# opcode -> (the items it pops: a count, or 0 for all down to the MARK; what is made of them (TypeError: an
# unhashable key); the container below them it is added to, None: it is pushed)
_BUILD: dict[str, tuple[int, Callable[[list[Any]], Any], type | None]] = {
    "TUPLE1": (1, tuple, None), "TUPLE2": (2, tuple, None), "TUPLE3": (3, tuple, None), "TUPLE": (0, tuple, None),
    "LIST": (0, list, None), "FROZENSET": (0, frozenset, None), "DICT": (0, _pairs, None),
    "APPEND": (1, list, list), "APPENDS": (0, list, list), "SETITEM": (2, _pairs, dict), "SETITEMS": (0, _pairs, dict),
    "ADDITEMS": (0, lambda items: list(dict.fromkeys(items)), set),  # a list: the set grows as from the items
}


def _ops(data: bytes | bytearray) -> Iterator[tuple[str, Any]]:
    """(opcode name, argument) of each opcode, decoded lazily; ValueError when the stream is not a pickle."""
    ops = pickletools.genops(data)
    while True:
        try:
            op, arg, _pos = next(ops)
        except StopIteration:
            return
        except Exception as exc:  # pickletools' own decoding of untrusted bytes raises ValueError and others
            raise ValueError(f"not a pickle stream ({type(exc).__name__}: {exc})") from None
        yield op.name, arg


def plain_unpickle(data: bytes | bytearray) -> Any:
    """Rebuild the plain data a pickle describes, without importing or calling anything.

    Raises UnsafePickle on any opcode that would reference code (GLOBAL, STACK_GLOBAL, REDUCE,
    BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID, ...) and ValueError on a malformed stream, on one that
    outgrows MAX_STACK / MAX_MEMO, or whose value is cyclic, deeper than MAX_DEPTH or larger than
    MAX_OBJECTS once shared references are counted where used (a "billion laughs" pickle)."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    for name, arg in _ops(data):
        if len(stack) > MAX_STACK or len(memo) > MAX_MEMO:
            raise ValueError("pickle: more items than a flight-recorder dump holds")
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            if len(stack) != 1:
                raise ValueError("pickle: unbalanced stack at STOP")
            return plain_copy(stack[0])
        _step(name, arg, stack, memo)
    raise ValueError("pickle: no STOP opcode")


def _step(name: str, arg: Any, stack: list[Any], memo: dict[int, Any]) -> None:
    """Apply one plain-data opcode to the stack and memo (UnsafePickle for any other)."""
    if name in _PLAIN_LEAF:
        stack.append(arg)
    elif name in _NEW:
        stack.append(_NEW[name]())
    elif name in _BUILD:
        count, make, into = _BUILD[name]
        try:
            made = make(_pop_mark(stack) if count == 0 else [*reversed([_pop(stack) for _ in range(count)])])
        except TypeError:
            raise ValueError("pickle: unhashable key") from None
        if into is None:
            stack.append(made)
        elif into is list:
            _top(stack, list).extend(made)
        else:
            _top(stack, into).update(made)
    elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
        if not stack:
            raise ValueError("pickle: nothing to memoize")
        memo[len(memo) if name == "MEMOIZE" else _memo_key(arg)] = stack[-1]
    elif name in ("GET", "BINGET", "LONG_BINGET"):
        key = _memo_key(arg)
        if key not in memo:
            raise ValueError("pickle: memo slot never filled")
        stack.append(memo[key])
    elif name == "POP":
        if not stack:
            raise ValueError("pickle: stack underflow")
        stack.pop()
    elif name == "POP_MARK":
        _pop_mark(stack)
    elif name == "DUP":
        stack.append(_top(stack, object))
    else:
        raise UnsafePickle(f"contains code references ({name}); not loaded")


def _memo_key(arg: Any) -> int:
    key = arg if isinstance(arg, int) else ascii_int(str(arg), 0)
    if key is None:
        raise ValueError("pickle: bad memo index")
    return key


def plain_copy(value: Any, max_objects: int = MAX_OBJECTS, max_depth: int = MAX_DEPTH) -> Any:
    """A tree copy of plain data (strings cleaned of lone surrogates, sets as lists, frozensets as tuples),
    refused (ValueError) when it is cyclic, nested deeper than `max_depth` or larger than `max_objects`
    counted as a tree: measured on the shared graph first (linear in it), so a "billion laughs" value is
    refused without building anything."""
    size = _tree_size(value, max_depth, {}, set())
    if size > max_objects:
        raise ValueError(f"the dump expands to {size:,} objects once shared references are repeated, more than "
                         f"the {max_objects:,} a flight-recorder dump holds")
    return _copy(value)


def _tree_size(value: Any, depth: int, sizes: dict[int, int], path: set[int]) -> int:
    """How many objects `value` is as a tree (saturating at 2**62); ValueError for a cycle or too deep."""
    if not isinstance(value, (list, tuple, dict, set, frozenset)):
        return 1
    known = sizes.get(id(value))
    if known is not None:
        return known
    if depth <= 0:
        raise ValueError(f"the dump is nested deeper than {MAX_DEPTH} levels")
    if id(value) in path:
        raise ValueError("the dump refers to itself (a cyclic list or dict)")
    path.add(id(value))
    children = [x for kv in value.items() for x in kv] if isinstance(value, dict) else value
    total = 1
    for child in children:
        total = min(total + _tree_size(child, depth - 1, sizes, path), 2**62)
    path.discard(id(value))
    sizes[id(value)] = total
    return total


def _copy(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {_copy(k): _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_copy(v) for v in value]
        return tuple(items) if isinstance(value, (tuple, frozenset)) else items  # hashable stays hashable
    return value


def looks_like_fr_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def looks_like_fr_json(head: bytes) -> bool:
    text = head[:65536]
    return text.lstrip()[:1] == b"{" and b'"entries"' in text and (
        b'"pg_config"' in text or b'"pg_status"' in text or b'"collective_seq_id"' in text)


def read_fr_dump(path: Path) -> dict[str, Any]:
    """The dump as plain data (a tree: no cycles, no shared references, bounded). Raises UnsafePickle /
    ValueError / OSError / InputError (not a regular file)."""
    capped = read_capped(path, MAX_DUMP_BYTES)
    if capped.left_out:
        raise ValueError(f"{capped.size:,} bytes is more than a flight-recorder dump should be")
    data = capped.data
    if looks_like_fr_pickle(bytes(data[:2])):
        dump = plain_unpickle(data)
    else:
        dump = plain_copy(loads_json(data.decode("utf-8", errors="replace")))
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise ValueError("not a flight-recorder dump (no 'entries' list)")
    return dump


def _int(value: Any, default: int = -1) -> int:
    """An int64 from a dump's bool, int, float or ASCII decimal string, else `default`."""
    number = int(value) if isinstance(value, bool) else loose_int(value)
    return default if number is None else number


def jsonable(value: Any) -> Any:
    """Plain data as JSON can hold it: bytes as text (hex), dict keys as text, sets and tuples as lists (a
    pickle may hold what JSON cannot: a tuple key, bytes). The value is a bounded tree (`plain_copy`)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value[:4096]).hex()
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _rank_of(path: Path, dump: dict[str, Any]) -> tuple[int, str]:
    """The dump's rank, and why it has none (-1): a `rank` key that is not a rank (-5, 1.5, text) is never
    replaced by the file name's digits."""
    if "rank" in dump:
        rank = rank_in_range(dump.get("rank"))
        if rank is None or isinstance(dump.get("rank"), bool):
            return -1, f"its 'rank' is {str(dump.get('rank'))[:40]!r}, not a rank (a whole number from 0)"
        return rank, ""
    match = _TRAILING_NUMBER.search(path.name)
    named = ascii_int(match.group(1), 0, MAX_RANK) if match else None
    return (-1, "no 'rank' key, no number at the end of the file name") if named is None else (named, "")


def _newest_ns(dump: dict[str, Any]) -> int:
    """The latest time the dump's own entries carry (-1: none)."""
    times = [_int(e.get(k)) for e in dump.get("entries") or [] if isinstance(e, dict)
             for k in ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")]
    return max(times, default=-1)


def _one_dump_per_rank(dumps: list[tuple[Path, dict[str, Any], int]], notes: list[LoadNote]
                       ) -> list[tuple[Path, dict[str, Any], int]]:
    """Where two dumps claim one rank (an older attempt's beside the real one), keep the one whose entries are
    the newest, saying so; when their times cannot tell them apart, keep neither (said too)."""
    by_rank: dict[int, list[tuple[Path, dict[str, Any], int]]] = {}
    for item in dumps:
        by_rank.setdefault(item[2], []).append(item)
    kept: list[tuple[Path, dict[str, Any], int]] = []
    for rank, claims in by_rank.items():
        if rank < 0 or len(claims) == 1:
            kept += claims
            continue
        ordered = sorted(claims, key=lambda c: _newest_ns(c[1]), reverse=True)
        said = f"{len(claims)} flight-recorder dumps claim rank {rank} ({', '.join(str(c[0]) for c in ordered)})"
        if _newest_ns(ordered[0][1]) > _newest_ns(ordered[1][1]):
            kept.append(ordered[0])
            said += ": this one, whose entries are the newest, is read; the others (an older attempt's?) are left out"
        else:
            said += (" and their entries' times cannot tell which is this run's: none of them is read; keep only this "
                     "run's dumps in the input")
        notes.append(LoadNote("warning", str(ordered[0][0]), said))
    return kept


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
            "input_sizes": json.dumps(jsonable(e.get("input_sizes")), separators=(",", ":")),
            "output_sizes": json.dumps(jsonable(e.get("output_sizes")), separators=(",", ":")),
            "dtypes": ",".join(str(d) for d in dtypes) if isinstance(dtypes, (list, tuple)) else str(dtypes),
            "state": str(e.get("state", "")), "retired": bool(e.get("retired", False)),
            "time_created_ns": _int(e.get("time_created_ns")),
            "started_ns": started if started > 0 else -1, "completed_ns": completed if completed > 0 else -1,
            "timeout_ms": _int(e.get("timeout_ms")), "file": file,
            "p2p_seq": _int(e.get("p2p_seq_id")) if e.get("is_p2p") else -1,
        })
    return rows


def _pg_names(dump: dict[str, Any]) -> dict[str, str]:
    """pg_status key -> process-group name. PyTorch keys `pg_status` by the rank's local pg id (the
    entries' `pg_id`: "5") and `pg_config` by the group's name ("41"): the entries pair the two; a pg id no
    entry names is paired by creation order (both count up as groups are created) when the two lists
    have the same length, else it is kept as it is (older dumps key both by name)."""
    names: dict[str, str] = {}
    for e in dump.get("entries") or []:
        group = e.get("process_group") if isinstance(e, dict) else None
        if isinstance(group, (list, tuple)) and group and "pg_id" in e:
            names.setdefault(str(e.get("pg_id")), str(group[0]))
    status, config = dump.get("pg_status"), dump.get("pg_config")
    if isinstance(status, dict) and isinstance(config, dict) and len(status) == len(config):
        def order(key: Any) -> tuple[int, str]:
            number = ascii_int(str(key), 0)
            return (number if number is not None else 1 << 62, str(key))
        paired = dict(zip((str(k) for k in sorted(status, key=order)), (str(k) for k in sorted(config, key=order))))
        if all(paired.get(k) == v for k, v in names.items()):
            names = {**paired, **names}
    return names


def _status(raw: Any, names: dict[str, str]) -> dict[str, dict[str, int]]:
    """pg_status by group name: each group's counters as ints."""
    return {names.get(str(pg), str(pg)): {str(k): _int(v) for k, v in status.items()}
            for pg, status in (raw.items() if isinstance(raw, dict) else ()) if isinstance(status, dict)}


def load_fr_dumps(paths: Sequence[Path]) -> tuple[pd.DataFrame, RunInfo, list[LoadNote]]:
    """(collectives_fr table, RunInfo {fr_pg_status: {rank: {pg: status}}, fr_pg_config: {pg: {...}}}, notes)."""
    rows: list[dict[str, Any]] = []
    status: dict[str, dict[str, dict[str, int]]] = {}
    config: dict[str, dict[str, Any]] = {}
    notes: list[LoadNote] = []
    dumps: list[tuple[Path, dict[str, Any], int]] = []
    for path in paths:
        try:
            dump = read_fr_dump(path)
        except UnsafePickle as exc:
            notes.append(LoadNote("error", str(path), f"flight-recorder pickle {exc}: only plain data is read "
                                  "from dumps (perftracker never unpickles untrusted files)"))
            continue
        except (OSError, ValueError, InputError) as exc:
            notes.append(LoadNote("warning", str(path), f"not a readable flight-recorder dump "
                                  f"({getattr(exc, 'message', exc)})"))
            continue
        rank, why = _rank_of(path, dump)
        if rank < 0:
            notes.append(LoadNote("warning", str(path), f"flight-recorder dump without a rank ({why}); its "
                                  "entries are kept as rank -1"))
        dumps.append((path, dump, rank))
    for path, dump, rank in _one_dump_per_rank(dumps, notes):
        rows.extend(_rows(dump, rank, str(path)))
        status[str(rank)] = _status(dump.get("pg_status"), _pg_names(dump))
        for pg, cfg in (dump.get("pg_config") or {}).items() if isinstance(dump.get("pg_config"), dict) else []:
            if isinstance(cfg, dict) and str(pg):
                config.setdefault(str(pg), {str(k): (str(v) if not isinstance(v, (int, list)) else jsonable(v))
                                            for k, v in cfg.items()})
    frame = conform("collectives_fr", pd.DataFrame(rows)) if rows else empty_table("collectives_fr")
    return frame, RunInfo(fr_pg_status=status, fr_pg_config=config) if status else RunInfo(), notes


