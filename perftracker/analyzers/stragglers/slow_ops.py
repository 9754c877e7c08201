"""Op-by-op comparison of one rank with its peers: which kernels, CPU ops or annotated regions take
longer on it, by total per step and by tail (p90), not only by median."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.store import Store

_KINDS = ("compute", "memcpy", "memset", "cpu_op", "annotation", "gpu_annotation")
MIN_EXCESS_SHARE = 0.02  # ignore ops whose excess is under 2% of the rank's total difference


def slower_ops(store: Store, rank: int, limit: int = 8) -> list[dict[str, Any]]:
    """Ops whose total time per step on `rank` exceeds the peers' median the most."""
    ev = store.events
    if ev.empty or ev["rank"].nunique() < 2:
        return []
    ev = ev[ev["kind"].isin(_KINDS) & ~ev["name"].astype(str).str.startswith("ProfilerStep#")]
    if ev.empty:
        return []
    steps = ev[ev["step"] >= 0].groupby("rank")["step"].nunique()
    grouped = ev.groupby(["rank", "name"], observed=True)["dur_ns"]
    table = pd.DataFrame({"total": grouped.sum(), "p90": grouped.quantile(0.9), "count": grouped.size()})
    table = table.reset_index()
    table["per_step"] = table["total"] / table["rank"].map(steps).fillna(1).clip(lower=1)
    mine = table[table["rank"] == rank].set_index("name")
    peers = table[table["rank"] != rank].groupby("name", observed=True)[["per_step", "p90"]].median()
    joined = mine.join(peers.add_suffix("_peers"), how="left").fillna({"per_step_peers": 0.0, "p90_peers": 0.0})
    joined["excess"] = joined["per_step"] - joined["per_step_peers"]
    positive = joined[joined["excess"] > 0]
    if positive.empty:
        return []
    floor = MIN_EXCESS_SHARE * float(positive["excess"].sum())
    top = positive[positive["excess"] >= floor].sort_values("excess", ascending=False).head(limit)
    return [{"name": str(name)[:160], "ms_per_step": round(float(r["per_step"]) / 1e6, 3),
             "peers_ms_per_step": round(float(r["per_step_peers"]) / 1e6, 3),
             "p90_ms": round(float(r["p90"]) / 1e6, 3), "peers_p90_ms": round(float(r["p90_peers"]) / 1e6, 3)}
            for name, r in top.iterrows()]
