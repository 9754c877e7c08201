"""Build small Kineto-format traces with exactly known timings, for unit tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


class TraceBuilder:
    """Events in microseconds, as torch.profiler writes them."""

    def __init__(self, rank: int | None = 0, world_size: int = 2) -> None:
        self.events: list[dict[str, Any]] = []
        self.rank = rank
        self.world_size = world_size
        self._corr = 1000

    def step(self, n: int, ts: float, dur: float) -> TraceBuilder:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
                            "ts": ts, "dur": dur, "args": {}})
        return self

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> TraceBuilder:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                            "args": args})
        return self

    def kernel(self, name: str, ts: float, dur: float, launch_ts: float | None = None, stream: int = 7,
               cat: str = "kernel", launch_name: str = "cudaLaunchKernel") -> TraceBuilder:
        self._corr += 1
        corr = self._corr
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                            "args": {"stream": stream, "correlation": corr, "device": 0}})
        lts = ts - 5 if launch_ts is None else launch_ts
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": launch_name, "pid": 1, "tid": 1,
                            "ts": lts, "dur": 3, "args": {"correlation": corr}})
        return self

    def graph(self, kernels: list[tuple[str, float, float]], launch_ts: float, stream: int = 7) -> TraceBuilder:
        """One cudaGraphLaunch at `launch_ts` replaying `kernels` (name, ts, dur): as CUPTI reports a graph
        replay, every kernel carries the correlation id of the one launch call."""
        self._corr += 1
        corr = self._corr
        for name, ts, dur in kernels:
            self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                                "dur": dur, "args": {"stream": stream, "correlation": corr, "device": 0}})
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1,
                            "ts": launch_ts, "dur": 5, "args": {"correlation": corr}})
        return self

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": self.events}
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        return doc

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path
