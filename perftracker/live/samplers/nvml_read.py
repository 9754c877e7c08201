"""Read one GPU's health metrics from NVML, leaving out whatever the GPU or driver does not support.

Every function takes the pynvml module (`nv`) and a device handle and returns plain values; each NVML call is
looked up by name and wrapped, so an unsupported or missing call only leaves its field out. Metric names and
units are `collectors/counters/gpu_samples.py`'s.
"""

from __future__ import annotations

from typing import Any

_ERRORS = (("nvlink_replay", "NVML_NVLINK_ERROR_DL_REPLAY"), ("nvlink_recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
           ("nvlink_crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"), ("nvlink_crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))
_THROUGHPUT = (("nvlink_tx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"),
               ("nvlink_rx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"))
# nvmlValueType_t -> the member of the value union that holds it
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                  "nvmlDeviceGetComputeRunningProcesses")
_MPS_LISTS = ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2",
              "nvmlDeviceGetMPSComputeRunningProcesses")


def call(nv: Any, name: str, *args: Any) -> Any:
    """`nv.<name>(*args)`, or None when the function is missing or raises (the field is then absent)."""
    try:
        return getattr(nv, name)(*args)
    except Exception:  # NVMLError_NotSupported and friends, NVMLLibraryMismatchError, AttributeError
        return None


def _const(nv: Any, name: str) -> int | None:
    value = getattr(nv, name, None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def identity(nv: Any, handle: Any) -> dict[str, str | None]:
    pci = call(nv, "nvmlDeviceGetPciInfo", handle)
    return {"uuid": _text(call(nv, "nvmlDeviceGetUUID", handle)),
            "pci_bus_id": _text(getattr(pci, "busId", None)) if pci is not None else None}


def _first_list(nv: Any, handle: Any, names: tuple[str, ...]) -> list[Any] | None:
    for name in names:
        procs = call(nv, name, handle)
        if isinstance(procs, list):
            return procs
    return None


def compute_pids(nv: Any, handle: Any) -> set[int] | None:
    """Pids with a compute context (or an MPS client) on the GPU; None when NVML could not list them."""
    lists = [_first_list(nv, handle, _PROCESS_LISTS), _first_list(nv, handle, _MPS_LISTS)]
    if all(procs is None for procs in lists):
        return None
    return {int(p.pid) for procs in lists for p in procs or () if isinstance(getattr(p, "pid", None), int)}


def pcie_metrics(nv: Any, handle: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric, const in (("pcie_tx_kbps", "NVML_PCIE_UTIL_TX_BYTES"), ("pcie_rx_kbps", "NVML_PCIE_UTIL_RX_BYTES")):
        counter = _const(nv, const)
        value = call(nv, "nvmlDeviceGetPcieThroughput", handle, counter) if counter is not None else None
        if isinstance(value, (int, float)):
            out[metric] = value
    replay = call(nv, "nvmlDeviceGetPcieReplayCounter", handle)
    if isinstance(replay, (int, float)):
        out["pcie_replay"] = replay
    return out


def _field_value(nv: Any, field: Any) -> float | None:
    if getattr(field, "nvmlReturn", -1) != (_const(nv, "NVML_SUCCESS") or 0):
        return None
    member = _VALUE_MEMBER.get(int(getattr(field, "valueType", -1)))
    value = getattr(getattr(field, "value", None), member, None) if member else None
    return value if isinstance(value, (int, float)) else None


def _throughput(nv: Any, handle: Any, links: list[int]) -> dict[str, float]:
    wanted = [(metric, fid) for metric, const in _THROUGHPUT if (fid := _const(nv, const)) is not None]
    if not wanted or not links:
        return {}
    ids = [(fid, link) for _, fid in wanted for link in links]  # scopeId = the link
    values = call(nv, "nvmlDeviceGetFieldValues", handle, ids)
    if values is None:
        return {}
    out: dict[str, float] = {}
    for (fid, _link), field in zip(ids, values):
        value = _field_value(nv, field)
        if value is None:
            continue
        metric = next(m for m, f in wanted if f == fid)
        out[metric] = out.get(metric, 0) + value
    return out


def nvlink_metrics(nv: Any, handle: Any) -> dict[str, float]:
    """NVLink link counts, summed error counters and throughput; {} for a GPU without NVLink.

    Values keep NVML's types (ints for counts and counters), so the JSON lines stay exact."""
    max_links = _const(nv, "NVML_NVLINK_MAX_LINKS") or 18
    enabled = _const(nv, "NVML_FEATURE_ENABLED")
    enabled = 1 if enabled is None else enabled
    states: dict[int, Any] = {}
    for link in range(max_links):
        state = call(nv, "nvmlDeviceGetNvLinkState", handle, link)
        if state is not None:
            states[link] = state
    if not states:
        return {}
    out: dict[str, float] = {"nvlink_links": len(states), "nvlink_active": sum(1 for s in states.values() if s == enabled)}
    for metric, const in _ERRORS:
        counter = _const(nv, const)
        if counter is None:
            continue
        counts = [call(nv, "nvmlDeviceGetNvLinkErrorCounter", handle, link, counter) for link in states]
        counts = [c for c in counts if isinstance(c, (int, float))]
        if counts:
            out[metric] = sum(counts)
    out.update(_throughput(nv, handle, sorted(states)))
    return out


def read_metrics(nv: Any, handle: Any) -> dict[str, float]:
    """Every metric NVML answers for the GPU (unsupported ones are absent)."""
    clock_sm, clock_mem = _const(nv, "NVML_CLOCK_SM"), _const(nv, "NVML_CLOCK_MEM")
    power = call(nv, "nvmlDeviceGetPowerUsage", handle)
    limit = call(nv, "nvmlDeviceGetEnforcedPowerLimit", handle)
    util = call(nv, "nvmlDeviceGetUtilizationRates", handle)
    reasons = call(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = call(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    sbe, dbe, volatile = (_const(nv, n) for n in ("NVML_SINGLE_BIT_ECC", "NVML_DOUBLE_BIT_ECC", "NVML_VOLATILE_ECC"))
    metrics: dict[str, Any] = {
        "sm_clock_mhz": call(nv, "nvmlDeviceGetClockInfo", handle, clock_sm),
        "mem_clock_mhz": call(nv, "nvmlDeviceGetClockInfo", handle, clock_mem),
        "max_sm_clock_mhz": call(nv, "nvmlDeviceGetMaxClockInfo", handle, clock_sm),
        "power_w": power / 1000.0 if isinstance(power, (int, float)) else None,
        "power_limit_w": limit / 1000.0 if isinstance(limit, (int, float)) else None,
        "temp_c": call(nv, "nvmlDeviceGetTemperature", handle, _const(nv, "NVML_TEMPERATURE_GPU")),
        "util_gpu_pct": getattr(util, "gpu", None),
        "util_mem_pct": getattr(util, "memory", None),
        "clock_event_reasons": reasons,
        "pcie_gen": call(nv, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_width": call(nv, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "pcie_max_gen": call(nv, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_max_width": call(nv, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        "ecc_sbe": call(nv, "nvmlDeviceGetTotalEccErrors", handle, sbe, volatile),
        "ecc_dbe": call(nv, "nvmlDeviceGetTotalEccErrors", handle, dbe, volatile),
    }
    out = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.update(pcie_metrics(nv, handle))
    out.update(nvlink_metrics(nv, handle))
    return out
