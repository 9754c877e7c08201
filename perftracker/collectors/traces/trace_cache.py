"""The per-rank cache of parsed traces: keyed by what a trace holds, written so that a crash leaves no half entry.

Promise: `content_key(path, comm_kernels)` is the same for the same bytes under the same file name (the
rank and host a file name can give are part of what a trace means), the same `CACHE_VERSION` and the same
communication-kernel patterns, wherever the file lies and whatever its mtime: a trace folder moved or
copied hits the cache, a file changed anywhere misses it. The bytes the parse reads (all of them, up to
the per-file cap of `bounded.file_cap`) are hashed whole, sha256 streamed in 1 MiB blocks: about 1.2 GB/s
here, 46 ms for a 53.7 MB trace and 4 ms for its 3 MB gzip, against about 0.25 s to parse it; so a miss
costs a few percent more, a hit a fraction of a parse, and, unlike a hash of sampled chunks, no entry is
ever handed back for a trace edited between the samples.

`CacheEntry` is one key's files in a cache folder: `<key>.events.parquet`, `<key>.steps.parquet` and
`<key>.meta.json` (the trace's facts and notes). `write` puts each under a temporary name and renames it,
the meta last, so an entry with a meta file is whole; `read_meta` takes an entry as cached only when all
three files are there and the meta is readable, else the trace is parsed again (and the entry rewritten).
Both engines (local processes, Ray tasks) go through this module, so a re-run after a crash, or with
more ranks, parses only the traces no entry holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker import __version__
from perftracker.bounded import file_cap, open_regular
from perftracker.collectors.traces.comm_kernels import CommKernels

CACHE_VERSION = f"{__version__}-9"  # -6: keys by content (sha256 of the bytes); -7: pg_config compacted; -8: op shapes; -9: all-gather sized by its output, GPU work launched before the window in no step
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


def content_key(path: Path, comm_kernels: CommKernels) -> str:
    """The cache key of one trace file: its bytes (up to the per-file cap, which the parse reads), its size
    and name, the cap, CACHE_VERSION and the comm-kernel patterns."""
    cap = file_cap()
    digest, size = content_digest(path, cap)
    basis = json.dumps([digest, size, path.name, cap, CACHE_VERSION, comm_kernels.fingerprint()])
    return hashlib.sha256(basis.encode()).hexdigest()[:32]


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

    def read_meta(self) -> dict[str, Any] | None:
        """The entry's facts and notes when the entry is whole, else None (parse the trace again)."""
        if not (self.meta_path.is_file() and self.events_path.is_file() and self.steps_path.is_file()):
            return None
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or not isinstance(meta.get("facts"), dict) \
                or not isinstance(meta.get("notes"), list):
            return None
        return meta

    def read_tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(events, steps) of the entry."""
        return pd.read_parquet(self.events_path), pd.read_parquet(self.steps_path)

    def write(self, events: pd.DataFrame, steps: pd.DataFrame, meta: dict[str, Any]) -> None:
        """Write the entry: each file under a temporary name, then renamed; the meta last. OSError when the
        folder cannot be written (the caller keeps the tables in memory instead)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        events_tmp, steps_tmp, meta_tmp = (Path(f"{path}.{uuid.uuid4().hex[:8]}.tmp")
                                           for path in (self.events_path, self.steps_path, self.meta_path))
        try:
            events.to_parquet(events_tmp, index=False)
            steps.to_parquet(steps_tmp, index=False)
            meta_tmp.write_text(json.dumps(meta), encoding="utf-8")
            os.replace(events_tmp, self.events_path)
            os.replace(steps_tmp, self.steps_path)
            os.replace(meta_tmp, self.meta_path)
        finally:
            for tmp in (events_tmp, steps_tmp, meta_tmp):
                tmp.unlink(missing_ok=True)
