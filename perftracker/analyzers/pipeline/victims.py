"""The victims of a slow worker in a pipeline job: who waits for it, where, and how long.

`victims_of(analysis, rank)`: its pipeline neighbours and data-parallel peers with their excess wait per step
(evidence of the slow worker's finding, never findings of their own); `seat_of` what the straggler finding says.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.layout.model import Layout
from perftracker.analyzers.layout.views import parallel_layout_view
from perftracker.analyzers.pipeline.views import stage_steps_view

MIN_WAIT_MS = 0.05


@dataclass(frozen=True)
class Victim:
    """One rank that waits for the slow worker."""

    rank: int
    position: str  # "rank 3: stage 1, replica 1"
    role: str  # "pipeline successor" | "pipeline predecessor" | "data-parallel peer"
    where_waiting: str  # "in receives" | "in the gradient collective"
    wait_ms: float  # its wait per step beyond a like rank of another replica (median over steps)

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "position": self.position, "role": self.role, "waits": self.where_waiting,
                "wait_ms_per_step": round(self.wait_ms, 3)}


@dataclass(frozen=True)
class Seat:
    """A named rank's place for its finding's words and evidence."""

    where: str  # " (stage 0, replica 1)" or ""
    position: str  # "rank 1: stage 0, replica 1" or ""
    victims: tuple[Victim, ...]
    alone_at_stage: bool

    def victims_clause(self) -> str:
        return ("; its victims: " + ", ".join(f"rank {v.rank} ({v.role}, {v.wait_ms:.1f} ms per step "
                                             f"{v.where_waiting})" for v in self.victims)) if self.victims else ""

    def evidence(self) -> dict[str, object]:
        return {**({"position": self.position} if self.position else {}),
                **({"victims": [v.to_dict() for v in self.victims]} if self.victims else {})}


def seat_of(analysis: Analysis, rank: int) -> Seat:
    """Where `rank` sits, whom it makes wait, and whether it is alone at its stage (docs/internals/stepgraph.md)."""
    layout = analysis.view(parallel_layout_view)
    sure = layout.stages > 1 or layout.confidence >= 0.9  # a layout guessed from strides alone is not said
    place = layout.where(rank).partition(": ")[2] if sure else ""
    return Seat(f" ({place})" if place else "", layout.where(rank) if place else "", tuple(victims_of(analysis, rank)),
                layout.stages > 1 and not layout.peers(rank, "dp"))


def _excess(rows: pd.DataFrame, layout: Layout, victim: int, slow: int, column: str) -> float:
    """The victim's median wait (column) minus that of a rank at its stage in a replica apart from the slow one's."""
    mine = rows[rows["rank"] == victim].set_index("step")[column]
    if mine.empty:
        return 0.0
    apart = [r for r in layout.stage_ranks(layout.stage_of(victim))
             if r != victim and layout.replica_of(r) != layout.replica_of(slow)]
    if not apart:
        return float(mine.median())
    others = rows[rows["rank"].isin(apart)].groupby("step")[column].median()
    return float((mine - others).dropna().median()) if not others.empty else float(mine.median())


def victims_of(analysis: Analysis, rank: int) -> list[Victim]:
    """The ranks `rank` makes wait (docs/internals/stepgraph.md); [] without a known layout."""
    layout = analysis.view(parallel_layout_view)
    if not layout.known or rank not in layout.coords:
        return []
    rows = analysis.view(stage_steps_view)
    before, after = layout.pipeline_neighbours(rank)
    wanted: list[tuple[int, str, str, str]] = []
    if after is not None:
        wanted.append((after, "pipeline successor", "in receives", "recv_wait_ms"))
    if before is not None:
        wanted.append((before, "pipeline predecessor", "in receives", "recv_wait_ms"))
    wanted += [(peer, "data-parallel peer", "in the gradient collective", "coll_wait_ms")
               for peer in layout.peers(rank, "dp")]
    out = []
    for victim, role, where, column in wanted:
        wait = _excess(rows, layout, victim, rank, column) if not rows.empty else 0.0
        if wait >= MIN_WAIT_MS:
            out.append(Victim(victim, layout.where(victim), role, where, wait))
    return out
