"""Sample NVML for the GPUs the job uses into `counters/<host>.gpu.jsonl`.

One JSON line per GPU per sample (identity, the job's pids and ranks on it, `nvml_read` metrics, the XIDs
seen since). Once a GPU has hosted a job process only such GPUs are sampled; until then, all. Without NVML
one note, nothing else.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from perftracker.live.sampler import LiveContext, append_records
from perftracker.live.samplers.nvml_read import call, compute_pids, identity, read_metrics


def _listing(values: list[int], most: int = 16) -> str:
    text = ", ".join(map(str, values[:most]))
    return text if len(values) <= most else f"{text}, ... ({len(values)} in all)"


@dataclass(slots=True, eq=False)
class NvmlSampler:
    name = "gpu"
    interval_s: float = 5.0
    handles: list[Any] = field(default_factory=list, init=False)
    samples: int = field(default=0, init=False)
    state: str = field(default="not started", init=False)
    used: dict[int, set[int]] = field(default_factory=dict, init=False)  # GPU index -> ranks seen on it
    listed: bool = field(default=False, init=False)  # NVML answered a compute-process list at least once
    _ids: dict[int, dict[str, str | None]] = field(default_factory=dict, init=False)
    _xids: list[tuple[int, int]] = field(default_factory=list, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)

    def start(self, ctx: LiveContext) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.state = "no NVML"
            ctx.note(f"GPU: NVML is not available on this host ({type(exc).__name__}: {exc}); GPU health is not "
                     "sampled, the other collectors carry on")
            return
        self.state = f"{len(self.handles)} GPU(s)"
        threading.Thread(target=self._watch_xids, name="perftracker-xid", daemon=True).start()

    def _watch_xids(self) -> None:
        try:
            import pynvml

            events = pynvml.nvmlEventSetCreate()
            for h in self.handles:
                call(pynvml, "nvmlDeviceRegisterEvents", h, pynvml.nvmlEventTypeXidCriticalError, events)
            while not self._stop.is_set():
                try:
                    data = pynvml.nvmlEventSetWait_v2(events, 1000)
                except pynvml.NVMLError:
                    continue
                index = call(pynvml, "nvmlDeviceGetIndex", data.device)
                self._xids.append((int(index) if index is not None else -1, int(data.eventData)))
        except Exception:
            return

    def sample(self, ctx: LiveContext) -> None:
        if not self.handles:
            return
        import pynvml

        ranks = {w.pid: w.rank for w in ctx.job.workers}
        job_pids: list[list[int]] = []  # per GPU: the job's pids NVML lists on it (and the GPUs the job uses)
        for i, h in enumerate(self.handles):
            pids = compute_pids(pynvml, h)
            self.listed = self.listed or pids is not None
            job_pids.append(sorted(p for p in pids or () if p in ranks))
            if job_pids[-1]:
                self.used.setdefault(i, set()).update(ranks[p] for p in job_pids[-1])
        xids, self._xids = self._xids, []
        chosen = sorted(self.used) if self.used else range(len(self.handles))
        lines = []
        for i in chosen:
            h = self.handles[i]
            metrics: dict[str, Any] = dict(read_metrics(pynvml, h))
            metrics["xid"] = [x for g, x in xids if g == i]
            if i not in self._ids:
                self._ids[i] = identity(pynvml, h)
            lines.append({"ts_ns": time.time_ns(), "host": ctx.host, "gpu": i, **self._ids[i],
                          "pids": job_pids[i], "ranks": sorted({ranks[p] for p in job_pids[i]}), "metrics": metrics})
        append_records(ctx.run_dir / "counters" / f"{ctx.host}.gpu.jsonl", lines)
        self.samples += 1
        self.state = (f"{len(self.used)} of {len(self.handles)} GPU(s) used by the job" if self.used
                      else f"{len(self.handles)} GPU(s), none lists a job process yet")

    def stop(self, ctx: LiveContext) -> None:
        """Says which GPUs were sampled, and why."""
        self._stop.set()
        n = len(self.handles)
        if self.handles and self.samples and self.used:
            ranks = sorted({r for rs in self.used.values() for r in rs})
            ctx.note(f"GPU: sampled GPU(s) {_listing(sorted(self.used))} of {n} on {ctx.host}, the ones NVML lists "
                     f"the job's processes on (ranks {_listing(ranks)}); the host's other GPUs were left out once the "
                     "job's processes showed up")
        elif self.handles and self.samples:
            why = (f"no GPU on {ctx.host} listed a process of the job (a CPU-only job, or a container whose PID "
                   "namespace differs from NVML's)" if self.listed
                   else f"NVML could not list the processes on the GPUs of {ctx.host}")
            ctx.note(f"GPU: {why}, so all {n} GPU(s) were sampled; ranks are tied to GPUs from NCCL logs / "
                     "LOCAL_RANK at analysis")
        if self.handles:
            try:
                import pynvml

                pynvml.nvmlShutdown()
            except Exception:
                pass

    def status(self) -> str:
        return f"{self.state}, {self.samples} sample(s)"
