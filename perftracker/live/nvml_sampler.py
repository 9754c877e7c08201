"""Sample NVML for the host's GPUs into `counters/<host>.gpu.jsonl`.

One JSON line per GPU per sample: ts_ns, host, gpu, uuid, pci_bus_id and `metrics` (SM/memory
clocks, max SM clock, power and limit, temperature, utilization, clock-event reasons bitmask,
PCIe generation/width and their maxima, ECC counts, XIDs seen since the last sample). Calls a GPU
does not support are skipped silently. Without NVML (no GPU or no driver) the sampler says so once
and does nothing; the other collectors carry on.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perftracker.live.sampler import LiveContext


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: the field is simply absent
        return None


@dataclass
class NvmlSampler:
    name: str = "gpu"
    interval_s: float = 5.0
    handles: list[Any] = field(default_factory=list)
    samples: int = 0
    state: str = "not started"
    _xids: list[tuple[int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

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
                _try(pynvml.nvmlDeviceRegisterEvents, h, pynvml.nvmlEventTypeXidCriticalError, events)
            while not self._stop.is_set():
                try:
                    data = pynvml.nvmlEventSetWait_v2(events, 1000)
                except pynvml.NVMLError:
                    continue
                index = _try(pynvml.nvmlDeviceGetIndex, data.device)
                self._xids.append((int(index) if index is not None else -1, int(data.eventData)))
        except Exception:
            return

    def sample(self, ctx: LiveContext) -> None:
        if not self.handles:
            return
        import pynvml

        host = socket.gethostname()
        lines = []
        xids, self._xids = self._xids, []
        for i, h in enumerate(self.handles):
            power = _try(pynvml.nvmlDeviceGetPowerUsage, h)
            limit = _try(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            util = _try(pynvml.nvmlDeviceGetUtilizationRates, h)
            reasons = _try(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
            if reasons is None:
                reasons = _try(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            metrics = {
                "sm_clock_mhz": _try(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": _try(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
                "max_sm_clock_mhz": _try(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
                "power_w": power / 1000.0 if power is not None else None,
                "power_limit_w": limit / 1000.0 if limit is not None else None,
                "temp_c": _try(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
                "util_gpu_pct": util.gpu if util is not None else None,
                "util_mem_pct": util.memory if util is not None else None,
                "clock_event_reasons": reasons,
                "pcie_gen": _try(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width": _try(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pcie_max_gen": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_max_width": _try(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                "ecc_sbe": _try(pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_SINGLE_BIT_ECC,
                                pynvml.NVML_VOLATILE_ECC),
                "ecc_dbe": _try(pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_DOUBLE_BIT_ECC,
                                pynvml.NVML_VOLATILE_ECC),
                "xid": [x for g, x in xids if g == i],
            }
            pci = _try(pynvml.nvmlDeviceGetPciInfo, h)
            uuid = _try(pynvml.nvmlDeviceGetUUID, h)
            lines.append({"ts_ns": time.time_ns(), "host": host, "gpu": i,
                          "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                          "pci_bus_id": (pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId))
                          if pci is not None else None,
                          "metrics": {k: v for k, v in metrics.items() if v is not None}})
        path = ctx.run_dir / "counters" / f"{host}.gpu.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(line) + "\n" for line in lines))
        self.samples += 1

    def stop(self, ctx: LiveContext) -> None:
        self._stop.set()
        if self.handles:
            try:
                import pynvml

                pynvml.nvmlShutdown()
            except Exception:
                pass

    def status(self) -> str:
        return f"{self.state}, {self.samples} sample(s)"
