"""Point-to-point send/recv matched as pairs, and what a pair's members waited.

`match_pairs(p2p)`: the k-th send from s to r in a step is the k-th recv at r from s; `pair_arrivals(frame)`: the
receiver waits for the send, the sender for no one, and a pair has no last arrival.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def match_pairs(p2p: pd.DataFrame, first_instance: int) -> pd.DataFrame:
    """The send/recv rows that pair up, with `instance` (from `first_instance` on) and `members` (2)."""
    known = p2p[p2p["peer"] >= 0]
    if known.empty:
        return known.assign(instance=pd.Series(dtype=np.int64), members=pd.Series(dtype=np.int64))
    is_send = (known["collective"] == "send").to_numpy()
    src = np.where(is_send, known["rank"].to_numpy(), known["peer"].to_numpy())
    dst = np.where(is_send, known["peer"].to_numpy(), known["rank"].to_numpy())
    frame = known.assign(src=src, dst=dst).sort_values(["rank", "window", "start_ns"], kind="stable")
    frame = frame.assign(k=frame.groupby(["rank", "collective", "src", "dst", "step"], sort=False).cumcount())
    keys = ["src", "dst", "step", "k"]
    both = frame.groupby(keys, sort=False)["collective"].transform("nunique") == 2
    frame = frame[both.to_numpy()].drop_duplicates([*keys, "collective"], keep="first")
    frame = frame.assign(instance=frame.groupby(keys, sort=True).ngroup() + first_instance, members=2)
    return frame.drop(columns=["src", "dst", "k"])


def pair_arrivals(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (arrivals with `start_aligned`) with the P2P rows' waits set, and no last member or lateness."""
    p2p = frame["p2p"].to_numpy()
    if not p2p.any():
        return frame
    rows = frame[p2p]
    send_start = rows["start_aligned"].where(rows["collective"] == "send").groupby(rows["instance"]).transform("max")
    is_send = (rows["collective"] == "send").to_numpy()
    recv_wait = (send_start - rows["start_aligned"]).clip(lower=0)
    idx = frame.index[p2p]
    frame.loc[idx, "lateness_ns"] = 0
    frame.loc[idx, "wait_ns"] = np.where(is_send, 0, recv_wait).astype(np.int64)
    frame.loc[idx, "own_ns"] = 0.0
    frame.loc[idx, "is_last"] = False
    frame.loc[idx, "gap_to_next_ns"] = 0
    return frame
