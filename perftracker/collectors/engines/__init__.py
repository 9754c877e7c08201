"""The seam of the map step: an engine turns trace paths into `FileResult`s, one per path, in input order.

Promise: an engine (`MapEngine`) takes the trace paths and `MapArgs`, calls `progress(done, total)`, and returns
what `trace_map.load_one` returns wherever it runs, so every finding is the same whichever engine mapped it.
`engine_for(name, ...)` builds `local` (`LocalEngine`, here: a process pool, or this process when one worker or one
file is enough) or `ray` (Ray tasks). See docs/internals/collectors.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from perftracker.collectors.traces.trace_map import FileResult, load_one
from perftracker.errors import UsageError

Progress = Callable[[int, int], None]
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class MapArgs:
    """The map step's arguments besides the path: plain values a worker process or a Ray task can take."""

    cache_dir: Path | None = None  # None: no cache (tables come back in the results)
    comm_kernel_files: tuple[Path, ...] = ()
    comm_kernel_patterns: tuple[str, ...] = ()


class MapEngine(Protocol):
    """Maps trace paths to their results (see the module docstring for the promise)."""

    def map(self, paths: Sequence[str], args: MapArgs, progress: Progress) -> list[FileResult]: ...


@dataclass(frozen=True)
class LocalEngine:
    workers: int = 0  # 0: one per CPU

    def map(self, paths: Sequence[str], args: MapArgs, progress: Progress) -> list[FileResult]:
        n = len(paths)
        workers = max(1, min(self.workers or (os.cpu_count() or 1), n))
        progress(0, n)
        if workers == 1 or n <= 1:
            results = []
            for path in paths:
                results.append(load_one(path, args.cache_dir, args.comm_kernel_files, args.comm_kernel_patterns))
                progress(len(results), n)
            return results
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(load_one, path, args.cache_dir, args.comm_kernel_files,
                                   args.comm_kernel_patterns) for path in paths]
            for done, _ in enumerate(as_completed(futures), start=1):
                progress(done, n)
            return [f.result() for f in futures]


def checked_engine_name(name: str) -> str:
    """`name` when it is an engine's (`ENGINES`); else the usage error that lists them."""
    if name not in ENGINES:
        raise UsageError(f"no engine called {name!r}", "engine / --engine", f"use one of {', '.join(ENGINES)}")
    return name


def engine_for(name: str, workers: int = 0, ray_address: str = "") -> MapEngine:
    """The engine called `name` (`local` or `ray`); `workers` bounds the local pool (0: one per CPU) and the
    CPUs of a Ray started for this command; `ray_address` is the cluster to join ("" : see ray_engine)."""
    if checked_engine_name(name) == "local":
        return LocalEngine(workers)
    from perftracker.collectors.engines.ray_engine import RayEngine

    return RayEngine(ray_address, workers)
