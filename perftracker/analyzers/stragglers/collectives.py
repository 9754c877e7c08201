"""Match the same collective instance across ranks, and align the ranks' clocks with it.

Each rank's collectives come from one source, the best its trace has: GPU communication kernels
(NCCL/RCCL), else gloo's `gloo:*` execution annotations, else `c10d::*` ops, else `nccl:*`
annotations, else `record_param_comms`. An instance is keyed by (process group, collective, step,
k): the k-th such collective the rank issued in that step, so ranks whose profiling windows differ
still line up, a missing rank just leaves a member out, and sub-groups (tensor / pipeline / data
parallel) are matched within their own group.

Views: `arrivals_view` (the run's arrivals, clock offsets and clock domains, `aligned_arrivals`).

Clock alignment: a collective completes almost simultaneously on all its members, so each rank's
offset is the median, over its matched instances, of its end time minus the instance's median end;
the ranks of one host share their host's clock, unless one host name hides several (`clock_domains`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.clock_domains import ClockDomains, clock_domains
from perftracker.store import Store

_CPU_SOURCES = (("gloo:", "gloo"), ("c10d::", "c10d"), ("nccl:", "nccl_annotation"),
                ("record_param_comms", "record_param_comms"))


def collective_events(store: Store) -> pd.DataFrame:
    """Per rank window, the collective events of its best source, with a `source` column."""
    if not store.n_events:
        return _empty()
    candidates = store.select_events(lambda ev: ev["kind"].isin(["comm", "collective_cpu"]).to_numpy())
    if candidates.empty:
        return _empty()
    names = candidates["name"].astype(str)
    source = pd.Series("", index=candidates.index, dtype=object)
    source[candidates["kind"] == "comm"] = "gpu_kernel"
    for prefix, label in _CPU_SOURCES:
        source[(source == "") & names.str.startswith(prefix)] = label
    candidates = candidates.assign(source=source.to_numpy())
    candidates = candidates[candidates["source"] != ""]
    priority = {"gpu_kernel": 0, "gloo": 1, "c10d": 2, "nccl_annotation": 3, "record_param_comms": 4}
    rank_best = candidates.assign(prio=candidates["source"].map(priority)).groupby(["rank", "window"])["prio"].min()
    prio = candidates["source"].map(priority).to_numpy()
    best = rank_best.reindex(pd.MultiIndex.from_arrays([candidates["rank"], candidates["window"]])).to_numpy()
    chosen = candidates[prio == best]
    out = chosen[["rank", "window", "step", "name", "collective", "pg", "bytes", "start_ns", "dur_ns", "source"]].copy()
    out["collective"] = out["collective"].astype(str).replace("", "unknown")
    out["pg"] = out["pg"].astype(str)
    out["end_ns"] = out["start_ns"] + out["dur_ns"]
    issued = candidates[candidates["source"] == "c10d"]
    if not issued.empty and (out["source"] == "gloo").any():
        out = _arrive_at_issue(out, issued)
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def _arrive_at_issue(out: pd.DataFrame, issued: pd.DataFrame) -> pd.DataFrame:
    """gloo runs a rank's collectives one after another on its own thread, so a gloo:* span starts when
    the previous one ended (at the same time on every rank). The rank *arrived* when its main thread
    issued the c10d:: op: pair the k-th issue with the k-th execution and start there."""
    keys = ["rank", "window", "step", "collective"]
    issue = issued.assign(collective=issued["collective"].astype(str)).sort_values("start_ns", kind="stable")
    issue = issue.assign(k=issue.groupby(keys, observed=True).cumcount())[[*keys, "k", "start_ns"]]
    out = out.sort_values("start_ns", kind="stable")
    out = out.assign(k=out.groupby(keys, observed=True).cumcount())
    merged = out.merge(issue.rename(columns={"start_ns": "issued_ns"}), on=[*keys, "k"], how="left")
    gloo = (merged["source"] == "gloo") & merged["issued_ns"].notna()
    issued_ns = merged["issued_ns"].fillna(0).astype(np.int64)
    earlier = gloo & (issued_ns < merged["start_ns"])
    merged.loc[earlier, "start_ns"] = issued_ns[earlier]
    merged["dur_ns"] = merged["end_ns"] - merged["start_ns"]
    return merged.drop(columns=["k", "issued_ns"])


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=["rank", "window", "step", "name", "collective", "pg", "bytes", "start_ns",
                                 "dur_ns", "source", "end_ns"])


def match_instances(coll: pd.DataFrame) -> pd.DataFrame:
    """Add `instance` (an id shared by the same collective on every member) and `members`.

    Only instances seen on at least two ranks are kept.
    """
    if coll.empty:
        return coll.assign(instance=pd.Series(dtype=np.int64), members=pd.Series(dtype=np.int64))
    coll = coll.sort_values(["rank", "window", "start_ns"], kind="stable")
    keys = ["rank", "pg", "collective", "step"]
    coll = coll.assign(k=coll.groupby(keys, sort=False, observed=True).cumcount())
    instance_keys = ["pg", "collective", "step", "k"]
    coll = coll.assign(instance=coll.groupby(instance_keys, sort=True, observed=True).ngroup())
    members = coll.groupby("instance")["rank"].transform("nunique")
    coll = coll.assign(members=members)
    # A rank seen twice in one instance (two windows of one step) keeps its first occurrence.
    coll = coll.drop_duplicates(["instance", "rank"], keep="first")
    return coll[coll["members"] >= 2].reset_index(drop=True)


def clock_offsets(matched: pd.DataFrame, iterations: int = 20) -> pd.Series:
    """Per-rank clock offset in ns (relative to the job's median clock), from collective end times. Iterated
    until it converges (below a microsecond): with real end-time jitter and skews of tens of ms between hosts,
    3 rounds left estimates 0.6 ms off and not shifting with the skew (tests/lab); about 10 converge."""
    if matched.empty:
        return pd.Series(dtype=np.int64)
    offsets = pd.Series(0.0, index=sorted(matched["rank"].unique()))
    for _ in range(iterations):
        aligned_end = matched["end_ns"] - matched["rank"].map(offsets).to_numpy()
        ref = aligned_end.groupby(matched["instance"]).transform("median")
        residual = (aligned_end - ref).groupby(matched["rank"]).median()
        offsets = offsets.add(residual, fill_value=0.0)
        if residual.abs().max() < 1000:  # below a microsecond: converged
            break
    offsets -= offsets.median()
    return offsets.round().astype(np.int64)


def arrivals(matched: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    """Per instance and member: aligned start/end, lateness (vs the earliest) and wait (for the last)."""
    if matched.empty:
        return matched.assign(lateness_ns=pd.Series(dtype=np.int64), wait_ns=pd.Series(dtype=np.int64),
                              is_last=pd.Series(dtype=bool), gap_to_next_ns=pd.Series(dtype=np.int64))
    off = matched["rank"].map(offsets).fillna(0).astype(np.int64).to_numpy()
    start = matched["start_ns"].to_numpy() - off
    end = matched["end_ns"].to_numpy() - off
    frame = matched.assign(start_aligned=start, end_aligned=end)
    grouped = frame.groupby("instance")["start_aligned"]
    first, last = grouped.transform("min"), grouped.transform("max")
    frame["lateness_ns"] = (frame["start_aligned"] - first).astype(np.int64)
    frame["wait_ns"] = (last - frame["start_aligned"]).astype(np.int64)
    # Who *caused* the lateness: a rank that arrives late only because its previous collective ended
    # late (it waited for someone else there, e.g. its tensor-parallel partner) is a victim. Its own
    # lateness is its arrival lateness minus how much later than the other members its previous
    # collective ended. In one synchronous group all previous ends agree, so this is the arrival.
    frame = frame.sort_values(["rank", "start_aligned"], kind="stable")
    prev_end = frame.groupby("rank")["end_aligned"].shift(1)
    excess = (prev_end - prev_end.groupby(frame["instance"]).transform("min")).fillna(0.0)
    lateness = frame["lateness_ns"].astype(float)
    frame["own_ns"] = lateness - excess.clip(lower=0.0).clip(upper=lateness)
    # The last arriver by its own work (ties: lowest rank) and how much more than the next member.
    order = frame.sort_values(["instance", "own_ns", "rank"], ascending=[True, False, True])
    top = order.groupby("instance").head(2)
    latest = top.groupby("instance").head(1).set_index("instance")
    second = top.groupby("instance").nth(1).set_index("instance")["own_ns"]
    gap = (latest["own_ns"] - second.reindex(latest.index)).fillna(0)
    # The group cannot gain more than the straggler's actual lateness.
    gap = gap.where(gap < latest["lateness_ns"], latest["lateness_ns"]).clip(lower=0).astype(np.int64)
    frame["is_last"] = False
    frame.loc[frame.index.isin(order.groupby("instance").head(1).index), "is_last"] = True
    frame["gap_to_next_ns"] = np.where(frame["is_last"], frame["instance"].map(gap).to_numpy(), 0)
    return frame.sort_values(["instance", "rank"]).reset_index(drop=True)


def straggler_tables(store: Store) -> tuple[pd.DataFrame, pd.Series]:
    """(arrivals per instance and rank, clock offset per rank in ns)."""
    arr, domains = aligned_arrivals(store)
    return arr, domains.offsets


def aligned_arrivals(store: Store) -> tuple[pd.DataFrame, ClockDomains]:
    """(arrivals per instance and rank, the ranks' clock domains and offsets: `clock_domains`)."""
    matched = match_instances(collective_events(store))
    domains = clock_domains(store, matched, clock_offsets(matched))
    return arrivals(matched, domains.offsets), domains


@dataclass(frozen=True)
class CollectiveArrivals:
    """Arrivals per matched collective instance and rank, on clocks aligned by `offsets` (ns per rank)."""

    arrivals: pd.DataFrame
    offsets: pd.Series
    domains: ClockDomains | None = None


def arrivals_view(analysis: Analysis) -> CollectiveArrivals:
    """The run's collective arrivals (see `straggler_tables`)."""
    arr, domains = aligned_arrivals(analysis.store)
    return CollectiveArrivals(arr, domains.offsets, domains)
