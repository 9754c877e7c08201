"""The map step of loading: one trace file parsed into that rank's tables, or read back from the cache.

Promise: `load_one(...)` (plain arguments, for a worker process or a Ray task) returns a `FileResult`: ok with
the trace's `TraceFacts` and its tables (in the result and/or as cached Parquet; `cached` says nothing was
parsed), or not ok with a message naming the file. A cache that cannot be written costs the cache, not the file.
"""

from __future__ import annotations

import gc
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import clean_text
from perftracker.collectors.traces.comm_kernels import CommKernels, cached_comm_kernels
from perftracker.collectors.traces.kineto import build_tables
from perftracker.collectors.traces.kineto_read import parse_trace
from perftracker.collectors.traces.ranks import host_from_name, rank_from_name
from perftracker.collectors.traces.trace_cache import CacheEntry, content_source, untrusted
from perftracker.errors import PerftrackerError
from perftracker.values import MAX_RANK, int_in, rank_in_range


def _ranks_text(ranks: Any) -> str:
    """A process group's ranks as "start:stop:step" when evenly spaced (nearly always), else "r0,r1,..."."""
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        return ""
    step = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    if step > 0 and all(b - a == step for a, b in zip(ranks, ranks[1:])):
        return f"{ranks[0]}:{ranks[-1] + step}:{step}"
    return ",".join(map(str, ranks))


def compact_pg_config(raw: Any, seen: dict[str, tuple[str, str]] | None = None) -> str:
    """distributedInfo.pg_config as one JSON string of [name, desc, size, ranks text] per group (why a string:
    docs/internals/collectors.md), with the groups `seen` in the trace's record_param_comms (name -> (desc,
    members as JSON text)) that pg_config lacks."""
    groups = [[str(pg["pg_name"]), str(pg.get("pg_desc", "")),
               size if isinstance(size := pg.get("pg_size"), int) and not isinstance(size, bool) else -1,
               _ranks_text(pg.get("ranks"))]
              for pg in (raw if isinstance(raw, list) else []) if isinstance(pg, dict) and "pg_name" in pg]
    named = {g[0] for g in groups}
    for name, (desc, ranks_json) in (seen or {}).items():
        try:
            ranks = json.loads(ranks_json)
            ranks = json.loads(ranks) if isinstance(ranks, str) else ranks
        except ValueError:
            continue
        if name not in named and isinstance(ranks, list) and ranks:
            groups.append([name, desc, len(ranks), _ranks_text(ranks), "record_param_comms"])
    return json.dumps(groups, separators=(",", ":"))


def pg_groups(text: str) -> list[tuple[str, str, int, str]]:
    """The groups of a `compact_pg_config` string: (name, desc, size, ranks text)."""
    try:
        groups = json.loads(text) if isinstance(text, str) and text else []
    except ValueError:
        return []
    return [(str(g[0]), str(g[1]), g[2], str(g[3])) for g in groups if isinstance(groups, list)
            and isinstance(g, list) and len(g) in (4, 5) and isinstance(g[2], int)]


def pg_sources(text: str) -> dict[str, str]:
    """pg name -> where a `compact_pg_config` string learned it: "record_param_comms" for the groups only the
    trace's ops named (pg_config's own groups are not listed)."""
    try:
        groups = json.loads(text) if isinstance(text, str) and text else []
    except ValueError:
        return {}
    return {str(g[0]): str(g[4]) for g in groups if isinstance(groups, list) and isinstance(g, list) and len(g) == 5}


def expand_ranks(text: str) -> list[int]:
    """The ranks of a group's ranks text (see `_ranks_text`); [] for none."""
    try:
        if ":" in text:
            start, stop, step = (int(x) for x in text.split(":"))
            return list(range(start, stop, step))
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return []


@dataclass(frozen=True)
class TraceFacts:
    """What the map step learned about one trace file besides its tables (cached as JSON beside them)."""

    rank: int | None  # None: neither distributedInfo nor the file name says (assigned in the reduce step)
    rank_source: str  # distributedInfo | filename | assigned
    host: str
    world_size: int  # -1 when unknown
    backend: str
    device_name: str
    base_ns: int  # -1 when the trace has no baseTimeNanoseconds
    start_ns: int
    end_ns: int
    n_events: int
    pg_config: str  # distributedInfo.pg_config, compacted (`compact_pg_config`; read back with `pg_groups`)

    def window_ns(self) -> tuple[int, int]:
        """(start, end) of its events on the wall clock, where the trace gives a base time."""
        base = self.base_ns if self.base_ns > 0 else 0
        return base + self.start_ns, base + self.end_ns


@dataclass
class FileResult:
    path: str
    ok: bool
    error: str = ""
    cache_stem: str = ""
    facts: TraceFacts | None = None  # set when ok
    notes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (message, data) about the file
    events: pd.DataFrame | None = None  # the tables themselves when in the result (else at cache_stem)
    steps: pd.DataFrame | None = None
    cached: bool = False  # read from the cache: this file was not parsed


ENTRY_CHANGED = ("its cache entry could not be read back (changed or damaged since it was checked); not analyzed: "
                 "run again (the trace is parsed anew) or give --no-cache")


def result_tables(result: FileResult) -> tuple[pd.DataFrame, pd.DataFrame] | str:
    """(events, steps) of a mapped trace, from the result or its cache entry, released from the result;
    ENTRY_CHANGED (a note's message) when the entry cannot be read back."""
    try:
        events = result.events if result.events is not None else pd.read_parquet(result.cache_stem + ".events.parquet")
        steps = result.steps if result.steps is not None else pd.read_parquet(result.cache_stem + ".steps.parquet")
    except Exception:  # noqa: BLE001 - pyarrow raises many kinds for a damaged file
        return ENTRY_CHANGED
    finally:
        result.events = result.steps = None
    return events, steps


def load_one(path_str: str, cache_dir: Path | None, files: tuple[Path, ...], patterns: tuple[str, ...],
             tables_in_result: bool = False) -> FileResult:
    """Map step: parse one trace (or read it from the cache in `cache_dir`); its tables go to the cache
    (Parquet) or back in the result, in the result too with `tables_in_result` (for a caller that cannot
    read this cache folder). The arguments are plain values so that a worker process can take them."""
    # A parse allocates hundreds of thousands of objects and no cycles: collecting meanwhile is waste.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return parse_one(Path(path_str), cache_dir, cached_comm_kernels(files, patterns), tables_in_result)
    finally:
        if gc_was_enabled:
            gc.enable()


def parse_one(path: Path, cache_dir: Path | None, comm_kernels: CommKernels,
              tables_in_result: bool = False) -> FileResult:
    path_str = str(path)
    try:
        source = content_source(path, comm_kernels) if cache_dir else None
        entry = CacheEntry(cache_dir, source.key) if cache_dir and source else None
        meta, ignored = entry.lookup(source) if entry else (None, "")
        if entry and meta is not None:
            result = FileResult(path_str, True, cache_stem=entry.stem, facts=TraceFacts(**meta["facts"]),
                                notes=[(str(m), dict(d)) for m, d in meta["notes"]], cached=True)
            if tables_in_result:
                result.events, result.steps = entry.read_tables()
            return result
        facts, notes, events, steps = _parse(path, comm_kernels)
        if ignored:
            notes.append((ignored, {}))
        result = FileResult(path_str, True, facts=facts, notes=notes, events=events, steps=steps)
        if entry is None or (ignored and untrusted(entry.folder, "the cache folder")):  # not ours to write into
            return result
        try:
            entry.write(events, steps, {"facts": asdict(facts), "notes": notes}, source)
        except OSError as exc:
            notes.append((f"not cached: cannot write to {entry.folder} ({exc.strerror or exc}); parsed again next "
                          "time", {}))
            return result
        result.cache_stem = entry.stem
        if not tables_in_result:
            result.events = result.steps = None
        return result
    except PerftrackerError as exc:
        return FileResult(path_str, False, error=exc.message)
    except (OSError, ValueError, MemoryError) as exc:
        return FileResult(path_str, False, error=f"{path}: could not be loaded ({type(exc).__name__}: {exc}).")


def _parse(path: Path, comm_kernels: CommKernels) -> tuple[TraceFacts, list[tuple[str, dict[str, Any]]],
                                                           pd.DataFrame, pd.DataFrame]:
    """Parse one trace into its facts, notes about it, and its events and steps tables."""
    trace = parse_trace(path)
    dist = trace.distributed_info
    notes = trace.messages()
    negative = trace.negative_durations  # the tables take them as 0: said, not silent
    if negative:
        notes.append((f"{negative:,} event(s) with a negative duration were taken as 0 long",
                      {"negative_durations": negative}))
    rank = rank_in_range(dist.get("rank"))
    if rank is None and dist.get("rank") is not None:
        notes.append((f"distributedInfo.rank {str(dist.get('rank'))[:40]!r} is not a rank (0 to {MAX_RANK}); "
                      "the rank is taken from the file name, else assigned", {}))
    rank_source = "distributedInfo" if rank is not None else ""
    if rank is None:
        rank = rank_from_name(path)
        rank_source = "filename" if rank is not None else "assigned"
    events, steps = build_tables(trace, rank if rank is not None else -1, 0, comm_kernels)
    notes += _launched_before(events, steps)
    device_name = ""
    if trace.device_properties:
        device_name = clean_text(str(trace.device_properties[0].get("name", "")))
    world = int_in(dist.get("world_size"), 1, MAX_RANK + 1)
    pg_config = dist.get("pg_config")
    facts = TraceFacts(
        rank=rank, rank_source=rank_source, host=trace.host_name or host_from_name(path),
        world_size=world if world is not None else -1, backend=clean_text(str(dist.get("backend", ""))),
        device_name=device_name, base_ns=trace.base_ns if trace.base_ns is not None else -1,
        start_ns=int(events["start_ns"].min()) if len(events) else 0,
        end_ns=int((events["start_ns"] + events["dur_ns"]).max()) if len(events) else 0,
        n_events=len(events), pg_config=compact_pg_config(pg_config, trace.columns.groups_seen))
    return facts, notes, events, steps


def _launched_before(events: pd.DataFrame, steps: pd.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    """A note on GPU work inside the profiled steps' span that no step launched (its launch preceded the
    window): it is left out of every step, with its count and GPU time said here."""
    if steps.empty or events.empty:
        return []
    lo = int(steps["start_ns"].min())
    hi = int((steps["start_ns"] + steps["dur_ns"]).max())
    start = events["start_ns"].to_numpy()
    orphan = (events["stream"].to_numpy() >= 0) & (events["step"].to_numpy() < 0) & (start >= lo) & (start < hi)
    if not orphan.any():
        return []
    gpu_ms = float(events["dur_ns"].to_numpy()[orphan].sum()) / 1e6
    until_ms = float((events["start_ns"] + events["dur_ns"]).to_numpy()[orphan].max() - lo) / 1e6
    return [(f"{int(orphan.sum())} GPU events ({gpu_ms:.1f} ms of GPU time, running until {until_ms:.1f} ms into "
             "the first profiled step) were launched before the profiled window: they belong to no step",
             {"events": int(orphan.sum()), "gpu_ms": round(gpu_ms, 3), "until_ms": round(until_ms, 3),
              "info": True})]  # scope, not damage: not a "partly usable (cut off)" input
