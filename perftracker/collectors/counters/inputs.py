"""Pick up host counter samples among the inputs of `perftracker analyze`, by content, whatever their names.

Promise: `load_counter_inputs(paths)` loads RDMA and GPU samples, nvidia-smi CSV, Prometheus text, sysfs dumps
and copies, ethtool dumps, scheduler accounting, process states and Ethernet counters, and returns
`({"counters", "devices", "netdev", "net_ifaces"[, "cpu_sched", "proc_states"]}, notes, RunInfo)`; other files
are left to the other loaders. Which file is which: docs/internals/collectors.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import loads_json, read_text
from perftracker.collectors.counters import (
    ethtool,
    gpu_samples,
    netdev_dumps,
    proc_state,
    prometheus,
    rdma,
    sched,
)
from perftracker.collectors.file_notes import cut_notes, line_list, unreadable
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform


def _first_json(head: str) -> dict[str, Any]:
    try:
        data = loads_json(next((line for line in head.splitlines()[:5] if line.strip()), ""))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def sniff(path: Path, head: str) -> str:
    """The kind of counter input a file holds: rdma_jsonl, gpu_jsonl, sched_jsonl, states_jsonl, smi_csv, prometheus,
    sysfs_dump, ethtool_dump or ''."""
    rec = _first_json(head) if head.lstrip().startswith("{") else {}
    if rec:
        return next((kind for kind, test in _JSON_KINDS if test(rec)), "")
    return next((kind for kind, looks_like in _TEXT_KINDS if looks_like(head)), "")


_JSON_KINDS: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("rdma_jsonl", lambda r: {"device", "port", "ts_ns"} <= r.keys() and ("counters" in r or "hw_counters" in r)),
    ("gpu_jsonl", lambda r: {"gpu", "ts_ns", "metrics"} <= r.keys()),
    ("sched_jsonl", sched.looks_like_sched_jsonl), ("states_jsonl", proc_state.looks_like_states_jsonl))
_TEXT_KINDS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("smi_csv", gpu_samples.looks_like_smi_csv), ("prometheus", prometheus.looks_like_exposition),
    ("sysfs_dump", rdma.looks_like_sysfs_dump), ("ethtool_dump", ethtool.looks_like_ethtool_dump))


def _load_prometheus(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]:
    text, capped = read_text(path)
    skipped: list[int] = []
    samples = prometheus.parse_text(text, skipped)
    host = path.name.split(".")[0]
    notes = cut_notes(path, capped)
    if skipped:
        notes.append(LoadNote("warning", str(path), f"{len(skipped)} sample line(s) with a value or time that is not a "
                              f"finite number in range were skipped (line {line_list(skipped)})",
                              {"lines": skipped[:50]}))
    if any(s.ts_ns < 0 for s in samples):
        notes.append(LoadNote("warning", str(path), "Prometheus samples without a timestamp or a preceding "
                              "`# scrape_time <unix seconds>` line were skipped: rates need sample times"))
        samples = [s for s in samples if s.ts_ns >= 0]
    ib_rows, ib_dev = prometheus.node_infiniband_rows(samples, host)
    gpu_rows, gpu_dev = prometheus.dcgm_rows(samples, host)
    return ib_rows + gpu_rows, ib_dev + gpu_dev, notes


_LOADERS = {
    "rdma_jsonl": rdma.load_rdma_jsonl,
    "gpu_jsonl": gpu_samples.load_gpu_jsonl,
    "smi_csv": gpu_samples.load_smi_csv,
    "prometheus": _load_prometheus,
    "sysfs_dump": rdma.load_sysfs_dump,
    "ethtool_dump": ethtool.load_ethtool_dump,
}


def load_counter_inputs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """(tables {"counters", "devices"}, notes, RunInfo {counter_sources}) for the host-counter part of an analysis."""
    rows: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    eth_rows: list[dict[str, Any]] = []
    eth_devices: list[dict[str, Any]] = []
    sched_rows: list[dict[str, Any]] = []
    state_rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    sources: dict[str, int] = {}
    copies = rdma.sysfs_copy_files(paths)
    copy_set = set(copies)
    for path in paths:
        if path in copy_set or path.name.endswith(netdev_dumps.SKIP_SUFFIXES):
            continue
        kind = sniff(path, netdev_dumps.head_text(path))
        if not kind:
            continue
        if kind in ("sched_jsonl", "states_jsonl"):  # the processes' CPU wait / states in a window: tables of their own
            try:
                r_sched, n_sched = (sched.load_sched_jsonl if kind == "sched_jsonl" else proc_state.load_states_jsonl)(path)
            except OSError as exc:
                notes.append(unreadable(path, "scheduler file", exc))
                continue
            (sched_rows if kind == "sched_jsonl" else state_rows).extend(r_sched)
            notes.extend(n_sched)
            sources[kind] = sources.get(kind, 0) + 1
            continue
        try:
            r, d, n = _LOADERS[kind](path)
        except (OSError, InputError) as exc:
            notes.append(unreadable(path, "counter file", exc))
            continue
        (eth_rows if kind == "ethtool_dump" else rows).extend(r)
        (eth_devices if kind == "ethtool_dump" else devices).extend(d)
        notes.extend(n)
        sources[kind] = sources.get(kind, 0) + 1
    if copies:
        r, d, n = rdma.load_sysfs_copies(copies)
        rows.extend(r)
        devices.extend(d)
        notes.extend(n)
        sources["sysfs_copy"] = len(copies)
    if eth_rows or eth_devices:
        r, d = ethtool.attach_to_ports(eth_rows, eth_devices, devices)
        rows.extend(r)
        devices.extend(d)
    counters = pd.DataFrame(rows)
    if not counters.empty:
        counters = counters.drop_duplicates(["host", "device", "port", "name", "ts_ns", "value"])
        counters = counters.sort_values(["host", "device", "port", "name", "ts_ns"], kind="stable")
    dev_frame = pd.DataFrame(devices)
    if not dev_frame.empty:
        dev_frame = dev_frame.drop_duplicates(["host", "kind", "device", "port"])
        dev_frame["numa_node"] = dev_frame["numa_node"].fillna(-1)
        dev_frame = dev_frame.fillna("")
    net_tables, net_notes, net_sources = netdev_dumps.load_net_inputs(paths)
    tables = {"counters": conform("counters", counters), "devices": conform("devices", dev_frame), **net_tables}
    if sched_rows:
        tables["cpu_sched"] = conform("cpu_sched", pd.DataFrame(sched_rows))
    if state_rows:
        tables["proc_states"] = conform("proc_states", pd.DataFrame(state_rows))
    return tables, notes + net_notes, RunInfo(counter_sources={**sources, **net_sources})
