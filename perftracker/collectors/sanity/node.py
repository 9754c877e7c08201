"""The node's own facts for `perftracker sanity`: its network links, each GPU's health (where NVML is installed)
and what holds this process's CPU back (cgroup CPU quota, throttling, CPU pressure).

Promise: `node_facts(sysfs_root)` and `cpu_sample(proc_root, cgroup_root)` return plain JSON-ready values and
never raise (an unreadable source is named in `errors`); `cpu_during(before, after)` adds what changed between two
samples; `parse_qdiscs` reads `tc qdisc show` text. The NVML path is untested in CI (no GPU).
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
                            ("pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth),
                            ("ecc_uncorrected", lambda h: pynvml.nvmlDeviceGetTotalEccErrors(
                                h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))):
                try:
                    rec[key] = int(fn(h))
                except Exception:  # noqa: BLE001 - not supported on this device (ECC: off)
                    continue
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


_MAX_READ = 1 << 16


def _read(path: Path) -> str:
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        return handle.read(_MAX_READ)


def _cgroup_paths(proc_root: Path) -> tuple[str, str]:
    """(v1 cpu controller path, v2 path) of this process; '' where that hierarchy is not in use."""
    v1 = v2 = ""
    for line in _read(proc_root / "self" / "cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v1, v2


def _psi_some_avg10(path: Path) -> float | None:
    for line in _read(path).splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "avg10":
                    return float(value)
    return None


def _stat(path: Path) -> dict[str, int]:
    out = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


# version -> (the folders under the cgroup root its hierarchy may be mounted at, the file that says it is)
_HIERARCHIES = {"v1": (("cpu", "cpu,cpuacct", "cpuacct,cpu"), "cpu.cfs_quota_us"),
                "v2": (("", "unified"), "cgroup.controllers")}


def _hierarchy(cgroup_root: Path, version: str) -> Path | None:
    names, marker = _HIERARCHIES[version]
    return next((cgroup_root / name for name in names if (cgroup_root / name / marker).is_file()), None)


def _chain(root: Path, path: str) -> list[Path]:
    """The cgroup's folder and its parents' up to the hierarchy's root, leaf first."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _quota(folder: Path, version: str) -> float | None:
    """The cgroup's own CPU quota in cores (v1: cpu.cfs_quota_us / cpu.cfs_period_us, v2: cpu.max), or None."""
    if version == "v2":
        fields = _read(folder / "cpu.max").split()
    else:
        fields = [_read(folder / name).strip() for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us")]
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = int(fields[0]), int(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def cpu_sample(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict[str, Any]:
    """See the module docstring."""
    out: dict[str, Any] = {"cgroup": "", "cgroup_version": "", "quota_cores": None, "quota_at": "",
                           "nr_periods": None, "nr_throttled": None, "throttled_s": None,
                           "psi_some_avg10": None, "cgroup_psi_some_avg10": None, "errors": {}}
    try:
        out["psi_some_avg10"] = _psi_some_avg10(proc_root / "pressure" / "cpu")
    except (OSError, ValueError) as exc:
        out["errors"]["psi"] = f"{type(exc).__name__}: {exc}"[:160]
    try:
        v1, v2 = _cgroup_paths(proc_root)
    except OSError as exc:
        out["errors"]["cgroup"] = f"{type(exc).__name__}: {exc}"[:160]
        return out
    v1_dir, v2_dir = _hierarchy(cgroup_root, "v1"), _hierarchy(cgroup_root, "v2")
    if v1 and v1_dir is not None:
        root, path, version = v1_dir, v1, "v1"
    elif v2 and v2_dir is not None:
        root, path, version = v2_dir, v2, "v2"
    else:
        out["errors"]["cgroup"] = f"no cgroup cpu hierarchy readable under {cgroup_root}"
        return out
    out["cgroup"], out["cgroup_version"] = path, version
    chain = _chain(root, path)
    for folder in chain:  # the tightest quota: on the cgroup or any parent
        try:
            quota = _quota(folder, version)
        except (OSError, ValueError):
            continue
        if quota is not None and (out["quota_cores"] is None or quota < out["quota_cores"]):
            out["quota_cores"], out["quota_at"] = round(quota, 4), "/" + str(folder.relative_to(root)).strip(".")
    try:
        stat = _stat(chain[0] / "cpu.stat")
        out["nr_periods"], out["nr_throttled"] = stat.get("nr_periods"), stat.get("nr_throttled")
        if "throttled_usec" in stat:
            out["throttled_s"] = stat["throttled_usec"] / 1e6
        elif "throttled_time" in stat:
            out["throttled_s"] = stat["throttled_time"] / 1e9
    except OSError as exc:
        out["errors"]["cpu.stat"] = f"{type(exc).__name__}: {exc}"[:160]
    if version == "v2":
        try:
            out["cgroup_psi_some_avg10"] = _psi_some_avg10(chain[0] / "cpu.pressure")
        except (OSError, ValueError):
            pass
    return out


def cpu_during(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """`after` plus `throttled_share` (of the scheduler periods between the samples) and `throttled_during_s`,
    where both samples counted them in the same cgroup."""
    out = dict(after)
    same = before.get("cgroup") == after.get("cgroup")
    try:
        periods = int(after["nr_periods"]) - int(before["nr_periods"]) if same else int(after["nr_periods"])
        throttled = int(after["nr_throttled"]) - int(before["nr_throttled"]) if same else int(after["nr_throttled"])
        out["throttled_share"] = round(throttled / periods, 4) if periods > 0 else None
        if after.get("throttled_s") is not None:
            base = float(before["throttled_s"]) if same and before.get("throttled_s") is not None else 0.0
            out["throttled_during_s"] = round(float(after["throttled_s"]) - base, 3)
    except (KeyError, TypeError, ValueError):
        out["throttled_share"] = None
    return out
