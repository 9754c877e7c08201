"""The typed layout of a job: its parallel dimensions and each rank's coordinates in them."""

from __future__ import annotations

from dataclasses import dataclass, field

# The dimensions in Megatron's rank order, fastest varying first ("tp-cp-ep-dp-pp").
DIMS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
WORDS = {"tp": "tensor rank", "cp": "context rank", "ep": "expert rank", "dp": "replica", "pp": "stage"}


@dataclass(frozen=True)
class Dim:
    """One parallel dimension: its size and its groups (each a tuple of global ranks in group order)."""

    name: str  # tp | cp | ep | dp | pp
    size: int
    groups: tuple[tuple[int, ...], ...]
    how: str  # "pg_desc NAME" | "send/recv neighbours" | "stride S"


@dataclass(frozen=True)
class Layout:
    """The job's parallel layout as far as its inputs tell it."""

    world: int
    dims: tuple[Dim, ...] = ()
    coords: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> dim -> coordinate
    method: str = ""  # how it was inferred, in words
    confidence: float = 0.0
    note: str = ""  # why it could not be inferred, or what is uncertain

    @property
    def known(self) -> bool:
        return bool(self.dims)

    def dim(self, name: str) -> Dim | None:
        return next((d for d in self.dims if d.name == name), None)

    def size(self, name: str) -> int:
        d = self.dim(name)
        return d.size if d is not None else 1

    @property
    def stages(self) -> int:
        return self.size("pp")

    def stage_of(self, rank: int) -> int:
        return self.coords.get(rank, {}).get("pp", 0)

    def replica_of(self, rank: int) -> int:
        return self.coords.get(rank, {}).get("dp", 0)

    def stage_ranks(self, stage: int) -> list[int]:
        return sorted(r for r in self.coords if self.stage_of(r) == stage)

    def group(self, rank: int, dim: str) -> tuple[int, ...]:
        """`rank`'s group along `dim`, in group order (() when the dim is unknown)."""
        d = self.dim(dim)
        return next((g for g in d.groups if rank in g), ()) if d is not None else ()

    def peers(self, rank: int, dim: str) -> tuple[int, ...]:
        """The other members of `rank`'s group along `dim`, in group order (() when the dim is unknown)."""
        return tuple(r for r in self.group(rank, dim) if r != rank)

    def pipeline_neighbours(self, rank: int) -> tuple[int | None, int | None]:
        """(predecessor, successor) of `rank` in its pipeline; None at the ends or without a pp dim."""
        group = self.group(rank, "pp")
        if not group:
            return None, None
        i = group.index(rank)
        return (group[i - 1] if i > 0 else None), (group[i + 1] if i + 1 < len(group) else None)

    def where(self, rank: int) -> str:
        """'rank 0: stage 0, replica 0' (the dims the layout has, pipeline first); 'rank 0' when unknown."""
        place = self.coords.get(rank)
        if not place:
            return f"rank {rank}"
        order = [d for d in ("pp", "dp", "tp", "cp", "ep") if d in place and self.size(d) > 1]
        parts = [f"{WORDS[d]} {place[d]}" for d in order]
        return f"rank {rank}: " + ", ".join(parts) if parts else f"rank {rank}"

    def summary(self) -> str:
        """'2 stages x 2 replicas (pp x dp)' style description."""
        if not self.dims:
            return "no layout"
        return " x ".join(f"{d.name.upper()}={d.size}" for d in sorted(self.dims, key=lambda d: -DIMS.index(d.name)))
