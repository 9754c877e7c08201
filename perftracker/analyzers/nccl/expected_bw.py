"""The bus bandwidth a job should reach on its hardware, from the topology NCCL printed and
perftracker/data/links.toml (`link_gbs`: the one place a link's bandwidth comes from)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from perftracker.analyzers.nccl.context import NcclContext
from perftracker.analyzers.thresholds import threshold


@lru_cache(maxsize=1)
def _links() -> dict[str, Any]:
    text = resources.files("perftracker").joinpath("data/links.toml").read_text(encoding="utf-8")
    data: dict[str, Any] = tomllib.loads(text)
    return data


def efficiency() -> float:
    """The share of NCCL's modelled link bandwidth a healthy nccl-tests bus bandwidth reaches (links.toml)."""
    return float(_links()["busbw_efficiency"])


def nvlink_spec(gpu: str) -> dict[str, Any] | None:
    """The [[nvlink]] entry of links.toml whose pattern matches a GPU's name, None when none does."""
    for spec in _links()["nvlink"]:
        if any(re.search(p, gpu, re.IGNORECASE) for p in spec["patterns"]):
            return dict(spec)
    return None


def link_gbs(kind: str, *, gpu: str = "", links: int = 0, gen: int = 0, lanes: int = 16, gbps: float = 0.0,
             line_rate: bool = False) -> float | None:
    """One direction's GB/s of a link: kind "nvlink" (gpu name, links; 0 links: all the GPU has), "pcie" (gen,
    lanes) or "net" (gbps: the port rate). NCCL's modelled figure, or the line rate with `line_rate`. None when
    links.toml has no figure for it."""
    if kind == "nvlink":
        spec = nvlink_spec(gpu)
        if spec is None:
            return None
        per = float(spec["line_gbs"] if line_rate else spec["nccl_gbs"])
        return per * (links or int(spec["links"]))
    if kind == "pcie":
        for spec in _links()["pcie"]:
            if int(spec["gen"]) == gen:
                return float(spec["lane_gbs"]) * lanes if line_rate else float(spec["nccl_x16_gbs"]) * lanes / 16
        return None
    if kind == "net":
        return gbps / 8.0 if gbps > 0 else None
    return None


@dataclass
class Topology:
    """What the NCCL log says of a job's links (bandwidths in GB/s as NCCL modelled them)."""

    gpus: tuple[str, ...] = ()
    nvl_gbs: list[float] = field(default_factory=list)  # GPU-GPU (or GPU-NVSwitch) NVLink paths and links
    pci_gbs: list[float] = field(default_factory=list)  # GPU-GPU paths over PCIe
    net_gbs: dict[str, float] = field(default_factory=dict)  # NET/x -> its bandwidth from a GPU
    gpu_pairs: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)  # (GPU/a, GPU/b) -> type, GB/s
    channels: int = 0  # coll channels NCCL built (the largest a process printed)
    transports: set[str] = field(default_factory=set)  # P2P, SHM, NET (from `via`)
    multi_node: bool = False
    topo_file: str = ""
    where: dict[str, str] = field(default_factory=dict)  # fact -> file:line


def topology_of(ctx: NcclContext, gpus: tuple[str, ...] = ()) -> Topology:
    """The `Topology` of every process of the context (docs/internals/analyzers.md)."""
    topo = Topology(gpus=gpus, multi_node=ctx.multi_node())
    for p in ctx.procs:
        for path in p.jsons("topo_path"):
            src, dst, bw, kind = str(path.get("src")), str(path.get("dst")), float(path.get("bw", 0)), path.get("type")
            if src.startswith("GPU/") and dst.startswith("GPU/"):
                (topo.nvl_gbs if kind == "NVL" else topo.pci_gbs).append(bw)
                pair = (min(src, dst), max(src, dst))
                if pair not in topo.gpu_pairs or bw < topo.gpu_pairs[pair][1]:
                    topo.gpu_pairs[pair] = (str(kind), bw)
                topo.where.setdefault("path", p.where("topo_path"))
            elif src.startswith("GPU/") and dst.startswith("NET/"):
                topo.net_gbs[dst] = max(topo.net_gbs.get(dst, 0.0), bw)
        for link in p.jsons("topo_link"):
            if link.get("type") == "NVL":
                topo.nvl_gbs.append(float(link.get("bw", 0)))
                topo.where.setdefault("path", p.where("topo_link"))
        for ch in p.jsons("channels"):
            n = int(str(ch.get("coll", "0")))
            if n > topo.channels:
                topo.channels = n
                topo.where["channels"] = p.where("channels")
        for v in p.values("channel_count"):
            if v.isdigit() and int(v) > topo.channels:
                topo.channels = int(v)
                topo.where["channels"] = p.where("channel_count", v)
        for via in p.values("via"):
            topo.transports.add(via.split("/", 1)[0])
    for s in ctx.settings.get("NCCL_TOPO_FILE", []):
        topo.topo_file = s.value
        topo.where.setdefault("topo_file", s.evidence)
    return topo


@dataclass(frozen=True)
class Asymmetry:
    """GPU pairs joined by paths of one type at different speeds: the slowest pair against the fastest."""

    path_type: str  # NVL, PIX, PXB, PHB, SYS ...
    slow_pair: tuple[str, str]
    slow_gbs: float
    fast_gbs: float
    pairs: int  # pairs of that type


def asymmetric_paths(topo: Topology) -> Asymmetry | None:
    """The path type whose GPU pairs differ most in bandwidth, when its slowest pair is below `nccl.path_asymmetry` x its
    fastest (a ring or tree through that pair runs at its speed); None when every type is even."""
    worst: Asymmetry | None = None
    for kind in sorted({k for k, _ in topo.gpu_pairs.values()}):
        pairs = {pair: bw for pair, (k, bw) in topo.gpu_pairs.items() if k == kind}
        slow = min(pairs, key=lambda pair: (pairs[pair], pair))
        fast = max(pairs.values())
        if fast > 0 and pairs[slow] < threshold("nccl.path_asymmetry") * fast and (worst is None or
                                                            pairs[slow] / fast < worst.slow_gbs / worst.fast_gbs):
            worst = Asymmetry(kind, slow, pairs[slow], fast, len(pairs))
    return worst


@dataclass(frozen=True)
class Expectation:
    """The bus bandwidth a job should reach, and why."""

    busbw_gbs: float  # what a healthy run reaches (the bounding link times NCCL's efficiency)
    bound_by: str  # the link that bounds it ("NVLink3 (A100/A800/A30): 12 links x 20.0 GB/s", ...)
    hardware_gbs: float  # the bounding link's modelled bandwidth
    nvl_links_seen: float = 0.0  # NVLinks the topology shows between GPUs (NVLink path GB/s / per-link GB/s)
    nvl_links_hw: int = 0  # NVLinks the GPU has
    channels_hw: int = 0  # the channels NCCL builds on the full hardware (2 per NVLink), 0 unknown
    notes: tuple[str, ...] = ()


def expect(topo: Topology) -> Expectation | None:
    """The expectation for a topology (docs/internals/analyzers.md); None when nothing bounds it."""
    bounds: list[tuple[float, str]] = []
    spec = next((s for s in (nvlink_spec(g) for g in topo.gpus) if s is not None), None)
    links_seen, links_hw, channels_hw = 0.0, 0, 0
    if topo.nvl_gbs:
        seen = min(topo.nvl_gbs)
        if spec is not None:
            per, links_hw = float(spec["nccl_gbs"]), int(spec["links"])
            links_seen = seen / per
            channels_hw = 2 * links_hw
            bounds.append((per * links_hw, f"{spec['name']}: {links_hw} links x {per:g} GB/s"))
        else:
            bounds.append((max(topo.nvl_gbs), f"NVLink at {max(topo.nvl_gbs):g} GB/s (NCCL's topology)"))
    elif topo.pci_gbs:
        bounds.append((max(topo.pci_gbs), f"PCIe at {max(topo.pci_gbs):g} GB/s (NCCL's topology)"))
    if topo.multi_node and topo.net_gbs:
        total = sum(topo.net_gbs.values())
        bounds.append((total, f"{len(topo.net_gbs)} NIC(s) at {max(topo.net_gbs.values()):g} GB/s per node"))
    if not bounds:
        return None
    hardware, bound_by = min(bounds)
    return Expectation(hardware * efficiency(), bound_by, hardware, links_seen, links_hw, channels_hw)
