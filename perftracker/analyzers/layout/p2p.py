"""The point-to-point operations of a run (send/recv), one row per operation a rank waited in or issued.

`p2p_ops(events)` keeps the events that are sends or receives (`collective` send, recv, send_recv) and, per
rank, the rows that carry the operation's own time.
"""

from __future__ import annotations

import pandas as pd

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
    return pd.DataFrame({
        "rank": kept["rank"].astype("int64"), "step": kept["step"].astype("int64"), "tid": kept["tid"].astype("int64"),
        "start_ns": kept["start_ns"].astype("int64"), "end_ns": (kept["start_ns"] + kept["dur_ns"]).astype("int64"),
        "op": kept["collective"].astype(str), "peer": peer,
    }).sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def neighbours(ops: pd.DataFrame) -> set[tuple[int, int]]:
    """Rank pairs (low, high) that exchanged point-to-point messages, where the peer is known."""
    known = ops[ops["peer"] >= 0] if not ops.empty else ops
    return {(min(int(r), int(p)), max(int(r), int(p))) for r, p in zip(known["rank"], known["peer"], strict=True)
            if int(r) != int(p)}
