"""The node's own facts for `perftracker sanity`: its network links (state, negotiated rate, error counters)
and, where NVML is installed, each GPU's health (throttle reasons, PCIe link against its maximum, ECC).

Promise: `node_facts(sysfs_root)` returns plain JSON-ready values and never raises: an unreadable source is
named in `errors`. Loopback, bridges and virtual-only interfaces without a rate are kept (their state is still
a fact) but marked. The NVML path is written for GPU nodes and untested in this repository's CI (no GPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perftracker.collectors.counters.netdev import interface_names, read_iface
from perftracker.collectors.counters.sysfs import is_bridge

ERROR_COUNTERS = ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped", "rx_crc_errors", "carrier_changes")


def nics(sysfs_root: Path) -> list[dict[str, Any]]:
    """One record per interface: name, operstate, carrier, speed_mbps (-1 unknown), mtu and error counters."""
    out = []
    for name in interface_names(sysfs_root):
        if name == "lo" or is_bridge(sysfs_root, name):
            continue
        state = read_iface(sysfs_root, name)
        if state is None:
            continue
        counters = state.get("counters", {})
        out.append({"name": name, "operstate": state.get("operstate", "unknown"), "carrier": state.get("carrier", 0),
                    "speed_mbps": state.get("speed_mbps", -1), "mtu": state.get("mtu", -1),
                    "errors": {k: int(counters[k]) for k in ERROR_COUNTERS if k in counters}})
    return out


def nvml_health() -> tuple[list[dict[str, Any]], str]:
    """Per GPU: name, throttle reasons (bitmask), PCIe generation/width now and at most, uncorrected ECC errors;
    and '' or why NVML could not be read (not installed, no driver)."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return [], "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError and its many subclasses: no driver, no device
        return [], f"NVML: {exc}"[:200]
    gpus = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            rec: dict[str, Any] = {"index": i, "name": str(pynvml.nvmlDeviceGetName(h))}
            for key, fn in (("throttle_reasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons),
                            ("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
                            ("pcie_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
                            ("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth),
                            ("pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth)):
                try:
                    rec[key] = int(fn(h))
                except Exception:  # noqa: BLE001 - not supported on this device
                    continue
            try:
                rec["ecc_uncorrected"] = int(pynvml.nvmlDeviceGetTotalEccErrors(
                    h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))
            except Exception:  # noqa: BLE001 - ECC off or unsupported
                pass
            gpus.append(rec)
    finally:
        pynvml.nvmlShutdown()
    return gpus, ""


def node_facts(sysfs_root: Path = Path("/sys"), with_gpus: bool = False) -> dict[str, Any]:
    """This node's links and (with_gpus) GPU health; see the module docstring."""
    facts: dict[str, Any] = {"nics": nics(sysfs_root), "gpus": [], "errors": {}}
    if with_gpus:
        gpus, why = nvml_health()
        facts["gpus"] = gpus
        if why:
            facts["errors"]["nvml"] = why
    return facts
