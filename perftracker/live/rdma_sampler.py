"""Sample RDMA port counters from sysfs into `counters/<host>.rdma.jsonl` (read-only, cheap).

Uses `perftracker.collectors.rdma.snapshot`, the same reader the offline loader and the tests use;
`sysfs_root` points at a fake tree in tests. No RDMA devices: one note, nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from perftracker.live.sampler import LiveContext


@dataclass
class RdmaSampler:
    name: str = "rdma"
    interval_s: float = 5.0
    ports: int = 0
    samples: int = 0
    enabled: bool = True

    def start(self, ctx: LiveContext) -> None:
        from perftracker.collectors.rdma import snapshot

        first = snapshot(ctx.sysfs_root, ctx.host)
        self.ports = len(first)
        if not first:
            self.enabled = False
            ctx.note(f"RDMA: no RDMA devices under {ctx.sysfs_root}/class/infiniband; port counters are not sampled")

    def sample(self, ctx: LiveContext) -> None:
        if not self.enabled:
            return
        from perftracker.collectors.rdma import snapshot

        records = snapshot(ctx.sysfs_root, ctx.host)
        path = ctx.run_dir / "counters" / f"{ctx.host}.rdma.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in records))
        self.samples += 1

    def stop(self, ctx: LiveContext) -> None:
        return None

    def status(self) -> str:
        return f"{self.ports} port(s), {self.samples} sample(s)" if self.enabled else "no RDMA devices"
