"""A test double of the `pynvml` module (nvidia-ml-py): the functions and constants the NVML sampler uses,
with the real names and values, over configurable fake GPUs.

Install it with `monkeypatch.setitem(sys.modules, "pynvml", FakePynvml([...]))`. Handles are the
`FakeGpu` objects. NVLink calls on a GPU with `nvlinks=0` raise NVMLError_NotSupported (a PCIe-only
GPU), links past `nvlinks` raise NVMLError_InvalidArgument, as the driver does. `tick()` advances
every GPU's counters by its per-tick steps (the time between two samples). With `unsupported=True`
every device query raises NVMLError_NotSupported. `xids` queued as (gpu index, xid) come out of
nvmlEventSetWait_v2.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    value = 999

    def __str__(self) -> str:
        return type(self).__name__


class NVMLError_InvalidArgument(NVMLError):
    value = 2


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NotFound(NVMLError):
    value = 6


class NVMLError_Timeout(NVMLError):
    value = 10


@dataclass
class FakeGpu:
    index: int
    nvlinks: int = 0  # 0: a PCIe-only GPU
    down_links: set[int] = field(default_factory=set)
    pids: list[int] = field(default_factory=list)  # compute processes NVML lists on the GPU
    crc_flit_per_tick: dict[int, int] = field(default_factory=dict)  # link -> CRC flit errors per tick
    replay_per_tick: dict[int, int] = field(default_factory=dict)  # link -> NVLink replays per tick
    pcie_replay_per_tick: int = 0
    nvlink_kib_per_tick: int = 1_000_000
    crc_flit: dict[int, int] = field(default_factory=dict)
    replay: dict[int, int] = field(default_factory=dict)
    pcie_replay: int = 3  # a constant history from before the window is not a rise
    nvlink_kib: int = 0
    sm_clock_mhz: int = 1980

    def tick(self) -> None:
        for link, n in self.crc_flit_per_tick.items():
            self.crc_flit[link] = self.crc_flit.get(link, 0) + n
        for link, n in self.replay_per_tick.items():
            self.replay[link] = self.replay.get(link, 0) + n
        self.pcie_replay += self.pcie_replay_per_tick
        self.nvlink_kib += self.nvlink_kib_per_tick if self.nvlinks else 0


class FakePynvml:
    """The pynvml surface used by perftracker.live (same names and constant values as nvidia-ml-py)."""

    NVMLError = NVMLError
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_Timeout = NVMLError_Timeout

    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_SINGLE_BIT_ECC = 0
    NVML_DOUBLE_BIT_ECC = 1
    NVML_VOLATILE_ECC = 0
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_NVLINK_ERROR_DL_REPLAY = 0
    NVML_NVLINK_ERROR_DL_RECOVERY = 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[FakeGpu], unsupported: bool = False) -> None:
        self.gpus = gpus
        self.unsupported = unsupported
        self.xids: list[tuple[int, int]] = []
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def tick(self) -> None:
        for g in self.gpus:
            g.tick()

    def __getattribute__(self, name: str) -> Any:
        attr = object.__getattribute__(self, name)
        if name.startswith("nvml") and callable(attr):
            calls = object.__getattribute__(self, "calls")
            calls[name] = calls.get(name, 0) + 1
            if (object.__getattribute__(self, "unsupported") and name.startswith("nvmlDevice")
                    and name not in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")):
                return _raiser
        return attr

    # -- library ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetIndex(self, h: FakeGpu) -> int:
        return h.index

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return f"GPU-fake-{h.index:04d}"

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + h.index:02X}:00.0".encode())

    # -- health ---------------------------------------------------------------------------------
    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        return h.sm_clock_mhz if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return 650_000  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return 700_000

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        return 62

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return 0

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        return 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGpu) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeGpu) -> int:
        return 16

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        return 1200 if counter == self.NVML_PCIE_UTIL_TX_BYTES else 800  # KB/s

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeGpu) -> int:
        return h.pcie_replay

    # -- NVLink -----------------------------------------------------------------------------
    def _link(self, h: FakeGpu, link: int) -> None:
        if not h.nvlinks:
            raise NVMLError_NotSupported()
        if not 0 <= link < h.nvlinks:
            raise NVMLError_InvalidArgument()

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        self._link(h, link)
        return self.NVML_FEATURE_DISABLED if link in h.down_links else self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, h: FakeGpu, link: int, counter: int) -> int:
        self._link(h, link)
        if counter == self.NVML_NVLINK_ERROR_DL_CRC_FLIT:
            return h.crc_flit.get(link, 0)
        if counter == self.NVML_NVLINK_ERROR_DL_REPLAY:
            return h.replay.get(link, 0)
        return 0

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list[Any]) -> list[SimpleNamespace]:
        out = []
        for fid in field_ids:
            fid, link = fid if isinstance(fid, tuple) else (fid, 0)
            ok = h.nvlinks and 0 <= link < h.nvlinks and link not in h.down_links and fid in (
                self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
            per_link = h.nvlink_kib // max(1, h.nvlinks - len(h.down_links))
            out.append(SimpleNamespace(fieldId=fid, scopeId=link, nvmlReturn=0 if ok else self.NVML_ERROR_NOT_SUPPORTED,
                                       valueType=self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                       value=SimpleNamespace(ullVal=per_link if ok else 0)))
        return out

    # -- processes ---------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30, gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for p in h.pids]

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        return self.nvmlDeviceGetComputeRunningProcesses_v3(h)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, h: FakeGpu) -> list[SimpleNamespace]:
        return []

    # -- XID events ---------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, events: object) -> None:
        pass

    def nvmlEventSetWait_v2(self, events: object, timeout_ms: int) -> SimpleNamespace:
        with self._lock:
            if self.xids:
                gpu, xid = self.xids.pop(0)
                return SimpleNamespace(device=self.gpus[gpu], eventType=self.nvmlEventTypeXidCriticalError,
                                       eventData=xid)
        time.sleep(min(timeout_ms, 20) / 1000)
        raise NVMLError_Timeout()


def _raiser(*args: Any) -> Any:
    raise NVMLError_NotSupported()


def public_names(fake: type[FakePynvml]) -> list[str]:
    """The NVML names the double offers (to compare with the real module)."""
    return [n for n in vars(fake) if n.startswith(("nvml", "NVML"))]

