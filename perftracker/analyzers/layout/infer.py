"""Infer the job's layout (TP/CP/EP/DP/PP) from its process groups and its send/recv neighbours.

`infer_layout(groups, world, pairs)` returns a `Layout`; `dim_of_desc` reads which dimension a group's `pg_desc`
names, in the words of Megatron, torchtitan and DeepSpeed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from perftracker.analyzers.layout.model import DIMS, Dim, Layout
from perftracker.store.run_info import ProcessGroup

Group = tuple[int, ...]

# Composite or special groups: their members span several dimensions (or a few ranks of one).
_COMPOSITE = re.compile(r"(_and_|with_cp|dp_cp|dp_shard_cp|embedding|amax|_gloo$|^model_parallel|mesh_default|"
                        r"default_pg|intra_|inter_|partial|hierarchical|expert_tensor|expert_data)")
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pp", re.compile(r"(pipeline|pipe\b|^pp$|^pp_|_pp$|mesh_pp)")),
    ("tp", re.compile(r"(tensor_model|tensor_parallel|^tp$|_tp$|mesh_tp|^model$|^mp_group$)")),
    ("cp", re.compile(r"(context_parallel|^cp$|_cp$|mesh_cp|sequence_parallel|^sp$)")),
    ("ep", re.compile(r"(expert_model|expert_parallel|^ep$|_ep$|mesh_ep)")),
    ("dp", re.compile(r"(data_parallel|^dp$|_dp$|mesh_dp|dp_replicate|dp_shard|^data$|replicate)")),
)


def dim_of_desc(desc: str) -> str | None:
    """tp | cp | ep | dp | pp when `desc` names exactly one dimension; None otherwise."""
    text = desc.strip().lower().lstrip("_")
    if not text or text == "undefined" or _COMPOSITE.search(text):
        return None
    hits = [dim for dim, pattern in _PATTERNS if pattern.search(text)]
    return hits[0] if len(hits) == 1 else None


def _partition(groups: Iterable[Group]) -> tuple[Group, ...]:
    """Merge overlapping groups (two families of one dim) into disjoint groups, each in first-seen order."""
    merged: list[list[int]] = []
    for g in groups:
        hit = [m for m in merged if set(m) & set(g)]
        base: list[int] = []
        for m in hit:
            merged.remove(m)
            base += [r for r in m if r not in base]
        base += [r for r in g if r not in base]
        merged.append(base)
    return tuple(tuple(m) for m in merged)


def _stride(group: Group) -> int:
    """The common step between a group's consecutive ranks; 0 when they are not evenly spaced."""
    if len(group) < 2:
        return 0
    steps = {b - a for a, b in zip(group, group[1:], strict=False)}
    return steps.pop() if len(steps) == 1 else 0


def infer_layout(groups: Mapping[str, ProcessGroup], world: int, pairs: Iterable[tuple[int, int]] = ()) -> Layout:
    """The layout the groups and send/recv pairs support (docs/internals/analyzers.md)."""
    pairs = set(pairs)
    named: dict[str, list[tuple[Group, str]]] = {}
    unnamed: dict[tuple[int, int], list[Group]] = {}
    for pg in groups.values():
        ranks = tuple(pg.ranks)
        dim = dim_of_desc(pg.desc)
        if len(ranks) < 2 or (dim is None and len(set(ranks)) >= world > 0):  # the world is no family; a named
            continue  # dimension may span it (a pure pipeline job's one pipeline)
        if dim is not None:
            named.setdefault(dim, []).append((ranks, pg.desc))
        elif not _COMPOSITE.search(pg.desc.strip().lower().lstrip("_")):  # a family of one dimension
            unnamed.setdefault((len(ranks), _stride(ranks)), []).append(ranks)
    dims: list[Dim] = []
    for dim, found in named.items():
        merged = _partition(sorted({g for g, _ in found}, key=lambda g: (-len(g), g)))
        descs = ", ".join(sorted({d for _, d in found}))
        dims.append(Dim(dim, max(len(g) for g in merged), tuple(sorted(merged)), f"pg_desc {descs}"))
    named_groups = {g for d in dims for g in d.groups}
    families = []
    for _key, gs in sorted(unnamed.items()):
        fam = tuple(sorted(set(gs) - named_groups))
        disjoint = len(set().union(*fam)) == sum(len(set(g)) for g in fam)
        if fam and disjoint and all(_stride(g) for g in fam):
            families.append(fam)
    guessed = _name_families(families, {d.name for d in dims}, pairs)
    dims += guessed
    if not any(d.name == "pp" for d in dims) and pairs and not dims:
        dims += _from_pairs(pairs, world)
    if not dims:
        why = ("the inputs list no process groups besides the world" if not groups
               else "no group names a dimension and no family of groups partitions the ranks")
        return Layout(world, note=f"Layout not inferred: {why}; findings name ranks only.")
    dims.sort(key=lambda d: DIMS.index(d.name))
    coords: dict[int, dict[str, int]] = {}
    for d in dims:
        for g in d.groups:
            for i, r in enumerate(g):
                coords.setdefault(r, {})[d.name] = i
    for r in range(world):
        coords.setdefault(r, {})
    product = math.prod(d.size for d in dims)
    notes = []
    if guessed:
        notes.append(", ".join(f"{d.name} ({d.how})" for d in guessed) + " named without the job's own names")
    if world and product != world:
        notes.append(f"the dimensions found ({' x '.join(str(d.size) for d in dims)}) cover {product} of {world} ranks")
    by_desc = all(d.how.startswith("pg_desc") for d in dims)
    confidence = 0.95 if by_desc and product == world else 0.6 if product == world else 0.4
    method = "; ".join(f"{d.name.upper()}={d.size} from {d.how}" for d in dims)
    return Layout(world, tuple(dims), coords, method, confidence, "; ".join(notes))


def _name_families(families: list[tuple[Group, ...]], taken: set[str],
                   pairs: set[tuple[int, int]]) -> list[Dim]:
    """Name unnamed families: the one holding every send/recv pair is pp; the rest by stride, widest dp."""
    out: list[Dim] = []
    rest = list(families)
    if "pp" not in taken and pairs:
        for fam in rest:
            if all(any(a in g and b in g for g in fam) for a, b in pairs):
                out.append(Dim("pp", len(fam[0]), fam, "send/recv neighbours"))
                rest.remove(fam)
                break
    free = [d for d in DIMS if d not in taken and d not in {x.name for x in out}]
    rest.sort(key=lambda fam: _stride(fam[0]))
    if rest and "dp" in free:  # the widest remaining stride: data parallel (replicas outermost but for pp)
        fam = rest.pop()
        out.append(Dim("dp", len(fam[0]), fam, f"stride {_stride(fam[0])}"))
        free.remove("dp")
    for fam, name in zip(rest, [d for d in free if d != "pp"], strict=False):
        out.append(Dim(name, len(fam[0]), fam, f"stride {_stride(fam[0])}"))
    return out


def _from_pairs(pairs: set[tuple[int, int]], world: int) -> list[Dim]:
    """Pipelines as the chains the send/recv pairs form (stages in rank order); replicas across them."""
    chains = sorted(tuple(sorted(c)) for c in _partition(sorted(pairs)))  # the pairs' connected components
    sizes = {len(c) for c in chains}
    if len(sizes) != 1:
        return []
    size = sizes.pop()
    out = [Dim("pp", size, tuple(chains), "send/recv neighbours")]
    if len(chains) > 1:
        replicas = tuple(tuple(c[i] for c in chains) for i in range(size))
        out.append(Dim("dp", len(chains), replicas, "send/recv neighbours (ranks at one stage)"))
    return out
