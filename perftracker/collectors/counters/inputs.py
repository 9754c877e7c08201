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

from perftracker.bounded import loads_json, read_head
from perftracker.collectors.counters import (
    ethtool,
    gpu_samples,
    netdev,
    netdev_dumps,
    prometheus,
    rdma,
    sched,
)
from perftracker.collectors.file_notes import unreadable
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform

SKIP_SUFFIXES = (".gz", ".parquet", ".html", ".png", ".zip", ".tar")


def _first_json(head: str) -> dict[str, Any]:
    try:
        data = loads_json(next((line for line in head.splitlines()[:5] if line.strip()), ""))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


Loaded = tuple[list[dict[str, Any]], list[dict[str, Any]], list[LoadNote]]
_Unreadable = tuple[str, tuple[type[OSError] | type[InputError], ...]]
_COUNTER: _Unreadable = ("counter file", (OSError, InputError))
_NET: _Unreadable = ("network counter file", (OSError, InputError))
_SCHED: _Unreadable = ("scheduler file", (OSError,))
# kind -> (its test, of a file's first JSON record for the *_jsonl kinds, else of its head; its loader; the table
# its rows go to ("ethtool": moved onto RDMA ports first); what an unreadable file is called, the errors that make
# it unreadable). A file is of the first kind in this order whose test holds, and also of a network text kind.
_KINDS: dict[str, tuple[Callable[[Any], bool], Callable[[Path], Loaded], str, _Unreadable]] = {
    "rdma_jsonl": (lambda r: {"device", "port", "ts_ns"} <= r.keys() and ("counters" in r or "hw_counters" in r),
                   rdma.load_rdma_jsonl, "counters", _COUNTER),
    "gpu_jsonl": (lambda r: {"gpu", "ts_ns", "metrics"} <= r.keys(), gpu_samples.load_gpu_jsonl, "counters", _COUNTER),
    "sched_jsonl": (sched.looks_like_sched_jsonl, sched.load_sched_jsonl, "cpu_sched", _SCHED),
    "states_jsonl": (sched.looks_like_states_jsonl, sched.load_states_jsonl, "proc_states", _SCHED),
    "net_jsonl": (netdev.looks_like_net_jsonl, netdev.load_net_jsonl, "netdev", _NET),  # devices: net_ifaces rows
    "smi_csv": (gpu_samples.looks_like_smi_csv, gpu_samples.load_smi_csv, "counters", _COUNTER),
    "prometheus": (prometheus.looks_like_exposition, prometheus.load_exposition, "counters", _COUNTER),
    "sysfs_dump": (rdma.looks_like_sysfs_dump, rdma.load_sysfs_dump, "counters", _COUNTER),
    "ethtool_dump": (ethtool.looks_like_ethtool_dump, ethtool.load_ethtool_dump, "ethtool", _COUNTER),
    "ip_link": (netdev_dumps.looks_like_ip_link, netdev_dumps.load_ip_link_dump, "netdev", _NET),
    "sysfs_net_dump": (netdev_dumps.looks_like_sysfs_net_dump, netdev_dumps.load_sysfs_net_dump, "netdev", _NET),
    "node_network": (netdev_dumps.looks_like_node_network, netdev_dumps.load_node_network, "netdev", _NET),
}
_NET_TEXT = ("ip_link", "sysfs_net_dump", "node_network")


def sniff(path: Path, head: str) -> str:
    """The kind of counter input a file holds: rdma_jsonl, gpu_jsonl, sched_jsonl, states_jsonl, net_jsonl, smi_csv,
    prometheus, sysfs_dump, ethtool_dump or '' (`sniff_net` tells the network texts apart)."""
    rec = _first_json(head) if head.lstrip().startswith("{") else {}
    kinds = (k for k in _KINDS if k.endswith("_jsonl") == bool(rec) and k not in _NET_TEXT)
    return next((k for k in kinds if _KINDS[k][0](rec or head)), "")


def sniff_net(head: str) -> str:
    """The kind of network-counter text a file holds: ip_link, sysfs_net_dump, node_network or '' (JSON records,
    `<host>.net.jsonl` samples included, are told apart by `sniff`)."""
    return "" if head.lstrip().startswith("{") else next((k for k in _NET_TEXT if _KINDS[k][0](head)), "")


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
        if path.name.endswith(SKIP_SUFFIXES):
            continue
        head = read_head(path, 65536).decode("utf-8", errors="replace")  # "" for a FIFO, device, ...
        for kind in ("" if path in copy_set else sniff(path, head), sniff_net(head)):
            if not kind:
                continue
            _, load, table, (what, errors) = _KINDS[kind]
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
