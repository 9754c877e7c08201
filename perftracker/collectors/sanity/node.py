"""The node's own facts for `perftracker sanity`: its network links and, where NVML is installed, each GPU's health.

Promise: `node_facts(sysfs_root)` returns plain JSON-ready values and never raises (an unreadable source is named
in `errors`); `parse_qdiscs` reads `tc qdisc show` text. The NVML path is untested in CI (no GPU).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from perftracker.collectors.counters.netdev import interface_names, read_iface
from perftracker.collectors.counters.sysfs import is_bridge

SHAPERS = ("tbf", "netem", "htb", "cake", "hfsc", "cbq")  # queueing disciplines that hold a rate or a delay
_UNITS = {"bit": 1e-6, "kbit": 1e-3, "mbit": 1.0, "gbit": 1e3, "tbit": 1e6,
          "bps": 8e-6, "kbps": 8e-3, "mbps": 8.0, "gbps": 8e3}
_RATE = re.compile(r"\brate (\d+(?:\.\d+)?)([KMGT]?(?:bit|bps))\b", re.IGNORECASE)
_DELAY = re.compile(r"\bdelay (\d+(?:\.\d+)?)(us|ms|s)\b")
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


def parse_qdiscs(text: str) -> list[dict[str, Any]]:
    """The shaping queueing disciplines in `tc qdisc show` output: kind, rate in Mbit/s and delay in ms where
    set, and the line itself (bounded)."""
    out = []
    for line in text.splitlines()[:64]:
        words = line.split()
        if len(words) < 2 or words[0] != "qdisc" or words[1] not in SHAPERS:
            continue
        rec: dict[str, Any] = {"kind": words[1], "text": line.strip()[:200]}
        rate = _RATE.search(line)
        if rate:
            rec["rate_mbit"] = round(float(rate.group(1)) * _UNITS[rate.group(2).lower()], 6)
        delay = _DELAY.search(line)
        if delay:
            rec["delay_ms"] = float(delay.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[delay.group(2)]
        out.append(rec)
    return out


def shaping(iface: str) -> tuple[list[dict[str, Any]], str]:
    """`iface`'s shaping queueing disciplines (tc) and '' or why they could not be read."""
    tc = shutil.which("tc") or next((p for p in ("/usr/sbin/tc", "/sbin/tc") if Path(p).is_file()), None)
    if tc is None:
        return [], "tc (iproute2) is not installed: the link's shaping is not read"
    try:
        done = subprocess.run([tc, "qdisc", "show", "dev", iface], capture_output=True, text=True, timeout=3)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"tc: {exc}"[:160]
    return parse_qdiscs(done.stdout[:65536]), "" if done.returncode == 0 else done.stderr.strip()[:160]


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
    for nic in facts["nics"]:
        nic["qdiscs"], why = shaping(str(nic["name"]))
        if why:
            facts["errors"][f"tc {nic['name']}"] = why
    if with_gpus:
        gpus, why = nvml_health()
        facts["gpus"] = gpus
        if why:
            facts["errors"]["nvml"] = why
    return facts
