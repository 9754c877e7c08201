"""Snapshot each rank's allow-listed environment into `env/rank-<r>.json` (never secrets)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import psutil

from perftracker.live.sampler import LiveContext
from perftracker.redaction import safe_env
from perftracker.rundir import atomic_write_text


@dataclass(slots=True, eq=False)
class EnvSampler:
    name = "env"
    interval_s = 3600.0
    written: int = field(default=0, init=False)

    def start(self, ctx: LiveContext) -> None:
        for w in ctx.job.workers:
            try:
                env = safe_env(psutil.Process(w.pid).environ())
            except psutil.AccessDenied:
                ctx.note(f"env: not allowed to read pid {w.pid}'s environment (run as the job's user or root)")
                continue
            except psutil.NoSuchProcess:
                continue
            record = {"rank": w.rank, "host": w.host, "pid": w.pid, "env": env}
            atomic_write_text(ctx.run_dir / "env" / f"rank-{w.rank}.json", json.dumps(record, indent=1, sort_keys=True))
            self.written += 1

    def sample(self, ctx: LiveContext) -> None:
        return None

    def stop(self, ctx: LiveContext) -> None:
        return None

    def status(self) -> str:
        return f"{self.written} rank(s)"
