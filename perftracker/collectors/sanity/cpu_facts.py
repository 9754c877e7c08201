"""What holds this process's CPU back, as the node itself can tell: cgroup CPU quota, throttling, CPU pressure.

Promise: `cpu_sample(proc_root, cgroup_root)` reads the cgroup's quota, throttling counters and CPU pressure,
never raising (an unreadable source named in `errors`); `cpu_during(before, after)` adds what changed between
two samples. Plain JSON-ready values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
