"""The per-rank cache of parsed traces: keyed by what a trace holds, written so that a crash leaves no half entry.

Promise: `content_source(path, comm_kernels).key` is the same for the same bytes, file name, `CACHE_VERSION` and
patterns, wherever the file lies; `CacheEntry` writes an entry's files so that one with a meta file is whole;
`lookup` uses an entry only when no one else could have written it and it checks out, else it is a miss with a
note, never a crash. Costs and trust rules: docs/internals/collectors.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from perftracker._version import __version__
from perftracker.bounded import file_cap, load_json_file, open_regular
from perftracker.collectors.traces.comm_kernels import CommKernels
from perftracker.errors import InputError

CACHE_VERSION = f"{__version__}-11"  # -11: events' seq, peer, splits; c10d ops' shapes; groups of record_param_comms; -6: keys by content (sha256 of the bytes); -7: pg_config compacted; -8: op shapes; -9: all-gather sized by its output, GPU work launched before the window in no step; -10: the pre-window note is info
_BLOCK = 1 << 20


def content_digest(path: Path, cap: int) -> tuple[str, int]:
    """(sha256 of the file's first `cap` bytes, the file's size): what the parse reads, read in blocks
    (never the whole file in memory; a regular file only, as `bounded.open_regular` opens it)."""
    digest = hashlib.sha256()
    left = cap
    with open_regular(path) as stream:
        size = os.fstat(stream.fileno()).st_size
        while left > 0 and (block := stream.read(min(_BLOCK, left))):
            digest.update(block)
            left -= len(block)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class Source:
    """What an entry must match of the trace it stands for: the key, the bytes' sha256 and the file's size."""

    key: str
    digest: str
    size: int


def content_source(path: Path, comm_kernels: CommKernels) -> Source:
    """The cache key of one trace file (its bytes up to the per-file cap, which the parse reads, its size and
    name, the cap, CACHE_VERSION and the comm-kernel patterns), with the digest and size the entry records."""
    cap = file_cap()
    digest, size = content_digest(path, cap)
    basis = json.dumps([digest, size, path.name, cap, CACHE_VERSION, comm_kernels.fingerprint()])
    return Source(hashlib.sha256(basis.encode()).hexdigest()[:32], digest, size)


def untrusted(path: Path, what: str) -> str:
    """Why `path` (the cache folder or an entry's file) may not be trusted ("" when it may): a symlink, not
    owned by this user, or writable by group or others."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{what} cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"{what} is a symlink"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"{what} belongs to user id {st.st_uid}, not to you ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{what} is writable by {'others' if st.st_mode & 0o002 else 'its group'} (mode {st.st_mode & 0o777:o})"
    return ""


def _table_record(path: Path) -> dict[str, Any]:
    """What the meta records of a table file: size, rows, columns (from its Parquet footer)."""
    meta = pq.read_metadata(path)
    return {"size": os.path.getsize(path), "rows": meta.num_rows, "columns": list(meta.schema.names)}


@dataclass(frozen=True)
class CacheEntry:
    """One trace's tables and facts in the cache folder, under its content key."""

    folder: Path
    key: str

    @property
    def stem(self) -> str:
        return str(self.folder / self.key)

    @property
    def events_path(self) -> Path:
        return Path(self.stem + ".events.parquet")

    @property
    def steps_path(self) -> Path:
        return Path(self.stem + ".steps.parquet")

    @property
    def meta_path(self) -> Path:
        return Path(self.stem + ".meta.json")

    def lookup(self, source: Source | None = None) -> tuple[dict[str, Any] | None, str]:
        """(the entry's meta, "") for a trusted entry that checks out against `source` (see the module
        docstring); (None, why) when it is ignored (why: a sentence for a note), (None, "") when absent."""
        if not self.meta_path.exists():
            return None, ""
        for path, what in ((self.folder, "the cache folder"), (self.meta_path, "its meta file"),
                           (self.events_path, "its events file"), (self.steps_path, "its steps file")):
            if why := untrusted(path, what):
                return None, (f"cache entry {self.key} ignored: {why}; parsed again (a cache must be yours alone: "
                              f"chmod go-w {self.folder}, or give --no-cache)")
        try:
            meta = load_json_file(self.meta_path, _MAX_META_BYTES)
            problem = _mismatch(meta, source, self.events_path, self.steps_path)
        except (InputError, OSError, ValueError, TypeError, KeyError) as exc:
            problem = f"damaged ({type(exc).__name__})"
        if problem:
            return None, f"cache entry {self.key} ignored: {problem}; parsed again"
        return meta, ""

    def read_tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(events, steps) of the entry."""
        return pd.read_parquet(self.events_path), pd.read_parquet(self.steps_path)

    def write(self, events: pd.DataFrame, steps: pd.DataFrame, meta: dict[str, Any],
              source: Source | None = None) -> None:
        """Write the entry: each file under a temporary name, then renamed; the meta last, recording what
        `lookup` checks. OSError when the folder cannot be written (the caller keeps the tables in memory)."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        events_tmp, steps_tmp, meta_tmp = (Path(f"{path}.{uuid.uuid4().hex[:8]}.tmp")
                                           for path in (self.events_path, self.steps_path, self.meta_path))
        try:
            events.to_parquet(events_tmp, index=False)
            steps.to_parquet(steps_tmp, index=False)
            meta = {**meta, "version": CACHE_VERSION, "tables": {"events": _table_record(events_tmp),
                                                                 "steps": _table_record(steps_tmp)}}
            if source is not None:
                meta["source"] = {"sha256": source.digest, "size": source.size}
            meta_tmp.write_text(json.dumps(meta), encoding="utf-8")
            for tmp in (events_tmp, steps_tmp, meta_tmp):
                os.chmod(tmp, 0o644 & ~_umask())
            os.replace(events_tmp, self.events_path)
            os.replace(steps_tmp, self.steps_path)
            os.replace(meta_tmp, self.meta_path)
        finally:
            for tmp in (events_tmp, steps_tmp, meta_tmp):
                tmp.unlink(missing_ok=True)


_MAX_META_BYTES = 64 * 1024 * 1024
_FACTS: dict[str, type | tuple[type, ...]] = {"rank": (int, type(None)), "rank_source": str, "host": str, "world_size": int, "backend": str,
          "device_name": str, "base_ns": int, "start_ns": int, "end_ns": int, "n_events": int, "pg_config": str}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mismatch(meta: Any, source: Source | None, events: Path, steps: Path) -> str:
    """Why a meta does not stand for this entry and trace ("" when it does)."""
    if not isinstance(meta, dict) or meta.get("version") != CACHE_VERSION:
        return "written by another version of perftracker"
    facts, notes = meta.get("facts"), meta.get("notes")
    if not isinstance(facts, dict) or set(facts) != set(_FACTS) \
            or not all(isinstance(facts[k], t) and not isinstance(facts[k], bool) for k, t in _FACTS.items()):
        return "its facts are not of the shape perftracker writes"
    if not isinstance(notes, list) or not all(isinstance(n, list) and len(n) == 2 and isinstance(n[0], str)
                                              and isinstance(n[1], dict) for n in notes):
        return "its notes are not of the shape perftracker writes"
    recorded = meta.get("source")
    if source is not None and recorded != {"sha256": source.digest, "size": source.size}:
        return "it records another trace (size or sha256 differ)"
    tables = meta.get("tables")
    if not isinstance(tables, dict) or tables.get("events") != _table_record(events) \
            or tables.get("steps") != _table_record(steps):
        return "its tables differ from what it records (size, rows or columns)"
    if tables["events"]["rows"] != facts["n_events"]:
        return "its events table does not hold the events its facts count"
    return ""
