"""The layout of an analysed run, computed once per analysis, and the post-pass that places findings' ranks in it.

`parallel_layout_view(analysis)` is the run's `Layout`, inferred (`infer.infer_layout`) from the Store's group
table and the send/recv neighbours its events show, over the ranks the run's traces or step files name;
`with_positions(findings, layout)` adds each named rank's place to the findings' evidence; `p2p_ops(events)` is the
run's point-to-point operations (send/recv), one row per operation a rank waited in or issued.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding
from perftracker.analyzers.layout.infer import infer_layout
from perftracker.analyzers.layout.model import Layout
from perftracker.analyzers.ranks.groups import run_ranks
from perftracker.evidence.common import PassEvidence

MAX_LISTED = 16
P2P = ("send", "recv", "send_recv")
COLUMNS = ["rank", "step", "tid", "start_ns", "end_ns", "op", "peer"]


def p2p_ops(events: pd.DataFrame) -> pd.DataFrame:
    """The run's point-to-point operations (docs/internals/analyzers.md)."""
    if events.empty or "collective" not in events.columns:
        return pd.DataFrame(columns=COLUMNS)
    rows = events[events["collective"].isin(P2P).to_numpy()]  # on the category codes: no string per event
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    gpu = rows["kind"].astype(str) == "comm"
    names = rows["name"].astype(str)
    dispatch = names.str.startswith(("c10d::", "record_param_comms"))
    ranks_gpu = set(rows.loc[gpu, "rank"])
    ranks_work = set(rows.loc[~gpu & ~dispatch, "rank"])
    in_rank = rows["rank"]
    keep = (gpu & in_rank.isin(ranks_gpu)) | (~gpu & ~in_rank.isin(ranks_gpu) & (
        ~dispatch | ~in_rank.isin(ranks_work)))
    kept = rows[keep]
    peer = kept["peer"].astype("int64") if "peer" in kept.columns else pd.Series(-1, index=kept.index)
    out = kept[["rank", "step", "tid", "start_ns"]].astype("int64").assign(
        end_ns=(kept["start_ns"] + kept["dur_ns"]).astype("int64"), op=kept["collective"].astype(str), peer=peer)
    return out.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def neighbours(ops: pd.DataFrame) -> set[tuple[int, int]]:
    """Rank pairs (low, high) that exchanged point-to-point messages, where the peer is known."""
    known = ops[ops["peer"] >= 0] if not ops.empty else ops
    return {(min(int(r), int(p)), max(int(r), int(p))) for r, p in zip(known["rank"], known["peer"], strict=True)
            if int(r) != int(p)}


def parallel_layout_view(analysis: Analysis) -> Layout:
    """The run's parallel layout (an empty Layout with a note where nothing tells)."""
    store = analysis.store
    ranks = run_ranks(analysis)
    world = max(ranks) + 1 if ranks else 0
    pairs = neighbours(p2p_ops(store.events)) if not store.events.empty else set()
    return infer_layout(store.run_info.process_groups, world, pairs)


def with_positions(findings: list[Finding], layout: Layout) -> list[Finding]:
    """The findings with each named rank's place in the layout in their evidence."""
    if not layout.known:
        return findings
    out = []
    for f in findings:
        ranks = [r for r in f.ranks if r in layout.coords and layout.coords[r]]
        if not ranks or "position" in f.evidence or "positions" in f.evidence:
            out.append(f)
            continue
        extra: PassEvidence = ({"position": layout.where(ranks[0])} if len(f.ranks) == 1 else
                               {"positions": [layout.where(r) for r in ranks[:MAX_LISTED]]})
        out.append(replace(f, evidence={**f.evidence, **extra}))
    return out
