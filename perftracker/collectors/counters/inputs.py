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
    netdev,
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
    """The kind of counter input a file holds: rdma_jsonl, gpu_jsonl, sched_jsonl, states_jsonl, net_jsonl, smi_csv,
    prometheus, sysfs_dump, ethtool_dump or '' (`netdev_dumps.sniff_net` tells the network texts apart)."""
    rec = _first_json(head) if head.lstrip().startswith("{") else {}
    if rec:
        return next((kind for kind, test in _JSON_KINDS if test(rec)), "")
    return next((kind for kind, looks_like in _TEXT_KINDS if looks_like(head)), "")


_JSON_KINDS: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("rdma_jsonl", lambda r: {"device", "port", "ts_ns"} <= r.keys() and ("counters" in r or "hw_counters" in r)),
    ("gpu_jsonl", lambda r: {"gpu", "ts_ns", "metrics"} <= r.keys()),
    ("sched_jsonl", sched.looks_like_sched_jsonl), ("states_jsonl", proc_state.looks_like_states_jsonl),
    ("net_jsonl", netdev.looks_like_net_jsonl))
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


Loaded = tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]


_Unreadable = tuple[str, tuple[type[OSError] | type[InputError], ...]]
_COUNTER: _Unreadable = ("counter file", (OSError, InputError))
_NET: _Unreadable = ("network counter file", (OSError, InputError))
# kind -> (loader, the table its rows go to ("ethtool": moved onto RDMA ports first), what an unreadable file is
# called, the errors that make it unreadable); scheduler files give tables of their own
_LOADERS: dict[str, tuple[Callable[[Path], Loaded], str, _Unreadable]] = {
    "rdma_jsonl": (rdma.load_rdma_jsonl, "counters", _COUNTER),
    "gpu_jsonl": (gpu_samples.load_gpu_jsonl, "counters", _COUNTER),
    "smi_csv": (gpu_samples.load_smi_csv, "counters", _COUNTER),
    "prometheus": (_load_prometheus, "counters", _COUNTER),
    "sysfs_dump": (rdma.load_sysfs_dump, "counters", _COUNTER),
    "ethtool_dump": (ethtool.load_ethtool_dump, "ethtool", _COUNTER),
    "sched_jsonl": (sched.load_sched_jsonl, "cpu_sched", ("scheduler file", (OSError,))),
    "states_jsonl": (proc_state.load_states_jsonl, "proc_states", ("scheduler file", (OSError,))),
    "net_jsonl": (netdev.load_net_jsonl, "netdev", _NET),  # "devices" of a network file: its net_ifaces rows
    "ip_link": (netdev_dumps.load_ip_link_dump, "netdev", _NET),
    "sysfs_net_dump": (netdev_dumps.load_sysfs_net_dump, "netdev", _NET),
    "node_network": (netdev_dumps.load_node_network, "netdev", _NET),
}


def load_counter_inputs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """(tables {"counters", "devices"}, notes, RunInfo {counter_sources}) for the host-counter part of an analysis."""
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in ("counters", "ethtool", "cpu_sched", "proc_states", "netdev")}
    devices: dict[str, list[dict[str, Any]]] = {table: [] for table in rows}
    notes: dict[str, list[LoadNote]] = {"host": [], "net": []}  # the network files' notes and kinds come last
    sources: dict[str, dict[str, int]] = {"host": {}, "net": {}}
    copies = rdma.sysfs_copy_files(paths)
    copy_set = set(copies)

    def take(group: str, table: str, kind: str, loaded: Loaded, files: int = 1) -> None:
        rows[table].extend(loaded[0])
        devices[table].extend(loaded[1])
        notes[group].extend(loaded[2])
        sources[group][kind] = sources[group].get(kind, 0) + files

    for path in paths:
        if path.name.endswith(netdev_dumps.SKIP_SUFFIXES):
            continue
        head = netdev_dumps.head_text(path)
        for kind in ("" if path in copy_set else sniff(path, head), netdev_dumps.sniff_net(head)):
            if not kind:
                continue
            load, table, (what, errors) = _LOADERS[kind]
            group = "net" if table == "netdev" else "host"
            try:
                take(group, table, kind, load(path))
            except errors as exc:
                notes[group].append(unreadable(path, what, exc))
    if copies:
        take("host", "counters", "sysfs_copy", rdma.load_sysfs_copies(copies), len(copies))
    if rows["ethtool"] or devices["ethtool"]:
        r, d = ethtool.attach_to_ports(rows["ethtool"], devices["ethtool"], devices["counters"])
        rows["counters"].extend(r)
        devices["counters"].extend(d)
    counters = pd.DataFrame(rows["counters"])
    if not counters.empty:
        counters = counters.drop_duplicates(["host", "device", "port", "name", "ts_ns", "value"])
        counters = counters.sort_values(["host", "device", "port", "name", "ts_ns"], kind="stable")
    dev_frame = pd.DataFrame(devices["counters"])
    if not dev_frame.empty:
        dev_frame = dev_frame.drop_duplicates(["host", "kind", "device", "port"])
        dev_frame["numa_node"] = dev_frame["numa_node"].fillna(-1)
        dev_frame = dev_frame.fillna("")
    tables = {"counters": conform("counters", counters), "devices": conform("devices", dev_frame),
              **netdev_dumps.net_tables(rows["netdev"], devices["netdev"])}
    tables.update({t: conform(t, pd.DataFrame(rows[t])) for t in ("cpu_sched", "proc_states") if rows[t]})
    return tables, notes["host"] + notes["net"], RunInfo(counter_sources={**sources["host"], **sources["net"]})
