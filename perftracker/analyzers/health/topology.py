"""Which GPU, NUMA node and NICs each rank uses (`rank_map`, with where each came from), so host evidence can be
tied to ranks."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.evidence.common import Location
from perftracker.evidence.network import TopologyEvidence
from perftracker.formats.nccl_lists import parse_list
from perftracker.store import Store
from perftracker.values import fact_json

_LOCAL_KEYS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of `frame` as plain dicts with string keys."""
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]


def _config(store: Store) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    cfg = store["config"]
    for row in records(cfg[cfg["rank"] >= 0]):
        out.setdefault(int(row["rank"]), {}).setdefault(str(row["key"]), str(row["value"]))
        if isinstance(row["host"], str) and row["host"]:
            out[int(row["rank"])].setdefault("__host__", row["host"])
    return out


NvmlGpus = dict[tuple[str, int], list[tuple[int, int]]]  # (host, rank) -> [(ranks on the GPU, GPU index)]


def _nvml_gpus(gpus: pd.DataFrame) -> NvmlGpus:
    """Where NVML saw each rank's process: (host, rank) -> [(number of ranks on that GPU, GPU index)]."""
    out: NvmlGpus = {}
    for host, dev, text in zip(gpus["host"], gpus["device"], gpus["ranks"]):
        ranks = [int(r) for r in str(text).split(",") if r.strip().isdigit()]
        for r in ranks:
            out.setdefault((str(host), r), []).append((len(ranks), int(str(dev).split(":")[1])))
    return out


def _ranks(store: Store, cfg: dict[int, dict[str, str]], nvml: NvmlGpus) -> list[int]:
    found = set(int(r) for r in store.ranks["rank"]) | set(int(r) for r in store.steps["rank"]) | set(cfg)
    found |= set(int(r) for r in store["nccl"]["rank"]) | {r for _, r in nvml}
    return sorted(r for r in found if r >= 0)


def _host(store: Store, rank: int, cfg: dict[str, str], only_host: str, nvml: NvmlGpus) -> tuple[str, str]:
    h = store.host_of(rank)
    if h:
        return h, "trace"
    if cfg.get("__host__"):
        return cfg["__host__"], "env"
    nccl = store["nccl"]
    hit = nccl.loc[(nccl["rank"] == rank) & (nccl["host"] != ""), "host"]
    if len(hit):
        return str(hit.iloc[0]), "nccl_log"
    if store.run_info.step_hosts.get(rank):
        return store.run_info.step_hosts[rank], "steps"
    seen_on = {h for h, r in nvml if r == rank}
    if len(seen_on) == 1:
        return seen_on.pop(), "nvml"
    return (only_host, "only_host") if only_host else ("", "")


def _parse_hca(value: str) -> list[tuple[str, str]]:
    """NCCL_IB_HCA "=mlx5_0:1,mlx5_1" -> [("mlx5_0", "1"), ("mlx5_1", "")]; exclusion lists give []."""
    spec = parse_list(value.strip())  # NCCL's list syntax: formats/nccl_lists.py
    return [] if spec.exclude else [(t.name.strip(), t.port.strip()) for t in spec.tokens if t.name.strip()]


def _nics(store: Store, rank: int, host: str, cfg: dict[str, str], numa: int,
          ports: pd.DataFrame) -> tuple[tuple[str, ...], str]:
    nccl = store["nccl"]
    logged = sorted({f"{j.get('hca')}/{j.get('port')}" for v in nccl.loc[(nccl["rank"] == rank) & (nccl["key"] == "nic"),
                                                                          "value"] for j in [fact_json(str(v))]
                     if j.get("hca")})
    if logged:
        return tuple(logged), "nccl_log"
    mine = ports[ports["host"] == host]
    listed = _parse_hca(cfg.get("NCCL_IB_HCA", ""))
    hca = mine[[any(d.startswith(name) and (not lp or lp == p) for name, lp in listed)
                for d, p in zip(mine["device"], mine["port"])]]
    near = mine[mine["numa_node"] == numa] if numa >= 0 else mine.iloc[0:0]
    for chosen, source in ((hca, "NCCL_IB_HCA"), (near, "numa"), (mine, "host")):
        if len(chosen):
            return tuple(sorted(f"{d}/{p}" for d, p in zip(chosen["device"], chosen["port"]))), source
    return (), ""


def _configured_gpu(store: Store, rank: int, host: str, local: int, cfg: dict[str, str],
                    gpus: pd.DataFrame) -> tuple[int, str]:
    nccl = store["nccl"]
    dev = nccl.loc[(nccl["rank"] == rank) & (nccl["device"] >= 0), "device"]
    logical, source = (int(dev.iloc[0]), "nccl_log") if len(dev) else (local, "local_rank")
    if logical < 0:
        return -1, ""
    visible = [v.strip() for v in cfg.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible:
        entry = visible[0] if len(visible) == 1 else visible[logical] if logical < len(visible) else ""
        if entry.isdigit():
            return int(entry), source + "+CUDA_VISIBLE_DEVICES"
        hit = gpus[(gpus["host"] == host) & (gpus["uuid"].str.startswith(entry))] if entry else gpus.iloc[0:0]
        if len(hit):
            return int(str(hit["device"].iloc[0]).split(":")[1]), source + "+CUDA_VISIBLE_DEVICES"
    return logical, source


def rank_map(store: Store) -> pd.DataFrame:
    """One row per rank: host, local_rank, gpu, pci_bus_id, uuid, numa_node, nics and their sources."""
    cfg = _config(store)
    devices = store["devices"]
    gpus, ports = devices[devices["kind"] == "gpu"], devices[devices["kind"] == "nic"]
    counter_hosts = sorted({str(h) for h in store["counters"]["host"].unique() if str(h)})
    only_host = counter_hosts[0] if len(counter_hosts) == 1 else ""
    nvml = _nvml_gpus(gpus)
    rows: list[dict[str, Any]] = []
    for rank in _ranks(store, cfg, nvml):
        c = cfg.get(rank, {})
        host, host_src = _host(store, rank, c, only_host, nvml)
        local = next((int(c[k]) for k in _LOCAL_KEYS if c.get(k, "").isdigit()), -1)
        rows.append({"rank": rank, "host": host, "host_source": host_src, "local_rank": local,
                     "local_source": "env" if local >= 0 else ""})
    frame = pd.DataFrame(rows, columns=["rank", "host", "host_source", "local_rank", "local_source"])
    for _host_name, g in frame.groupby("host"):
        order = {r: i for i, r in enumerate(sorted(g["rank"]))}
        missing = frame.index.isin(g.index) & (frame["local_rank"] < 0)
        frame.loc[missing, "local_rank"] = frame.loc[missing, "rank"].map(order)
        frame.loc[missing, "local_source"] = "inferred"
    out = []
    for row in records(frame):
        c = cfg.get(int(row["rank"]), {})
        gpu, gpu_src = _configured_gpu(store, int(row["rank"]), str(row["host"]), int(row["local_rank"]), c, gpus)
        if seen := nvml.get((str(row["host"]), int(row["rank"]))):  # where NVML saw the process wins
            gpu, gpu_src = min(seen, key=lambda g: (g[0], g[1] != gpu, g[1]))[1], "nvml"
        info = gpus[(gpus["host"] == row["host"]) & (gpus["device"] == f"gpu:{gpu}")]
        numa = int(info["numa_node"].iloc[0]) if len(info) else -1
        nics, nic_src = _nics(store, int(row["rank"]), str(row["host"]), c, numa, ports)
        out.append({**row, "gpu": gpu, "gpu_source": gpu_src,
                    "pci_bus_id": str(info["pci_bus_id"].iloc[0]) if len(info) else "",
                    "uuid": str(info["uuid"].iloc[0]) if len(info) else "", "numa_node": numa,
                    "nics": nics, "nic_source": nic_src})
    return pd.DataFrame(out)


def rank_map_view(analysis: Analysis) -> pd.DataFrame:
    """The analysis' `rank_map`, computed once for every analyzer and pass that places a rank (read-only)."""
    return rank_map(analysis.store)


def ranks_of_gpu(rmap: pd.DataFrame, host: str, gpu: int) -> tuple[int, ...]:
    if rmap.empty:
        return ()
    return tuple(int(r) for r in rmap.loc[(rmap["host"] == host) & (rmap["gpu"] == gpu), "rank"])


def analyze_topology(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    if store["counters"].empty and store["devices"].empty:
        return []
    rmap = analysis.view(rank_map_view)
    if rmap.empty:
        return []
    mapped = int((rmap["gpu"] >= 0).sum())
    entries: list[Location] = [{"rank": int(r["rank"]), "host": r["host"], "gpu": int(r["gpu"]), "pci_bus_id": r["pci_bus_id"],
                "numa_node": int(r["numa_node"]), "nics": list(r["nics"]),
                "sources": {"host": r["host_source"], "local_rank": r["local_source"], "gpu": r["gpu_source"],
                            "nics": r["nic_source"]}} for r in records(rmap.head(512))]
    return [Finding(analyzer="topology", severity=Severity.INFO,
                    title=f"Mapped {mapped} of {len(rmap)} rank(s) to their GPU, NUMA node and NICs",
                    recommendation="Context: this map ties GPU and NIC samples to ranks; 'inferred' sources are "
                    "guesses (rank order within the host): capture env/rank-<r>.json for an exact map.",
                    evidence=TopologyEvidence(ranks=entries), key="topology:map")]
