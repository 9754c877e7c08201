"""The local engine: the map step in a process pool on this machine (the default engine).

Promise: `LocalEngine(workers).map(paths, args, progress)` runs `trace_map.load_one` for each path in
`workers` processes (0: one per CPU; never more than there are files), or in this process when one
worker or one file is enough, reporting each finished file; results in the order of the paths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from perftracker.collectors.engines import MapArgs, Progress
from perftracker.collectors.traces.trace_map import FileResult, load_one


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
