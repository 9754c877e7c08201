"""Match the same collective instance across ranks, and align the ranks' clocks with it.

Collectives are matched inside their process group in the group's own order (P2P as pairs, `match_pairs`); each rank's
clock offset is its median end minus the instances' median end. `arrivals_view` is the run's arrivals, offsets
and clock domains; `matching_findings` says when the matching fell back or refused members.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.stragglers.clock_domains import ClockDomains, clock_domains
from perftracker.analyzers.stragglers.group_of import (
    P2P_COLLECTIVES,
    Alignment,
    fill_groups,
    instance_keys,
    order_keys,
    realign,
)
from perftracker.evidence.steps import StragglerEvidence
from perftracker.store import Store
from perftracker.store.run_info import ProcessGroup

_CPU_SOURCES = (("gloo:", "gloo"), ("c10d::", "c10d"), ("nccl:", "nccl_annotation"),
                ("record_param_comms", "record_param_comms"))
_COLUMNS = ["rank", "window", "step", "name", "collective", "pg", "bytes", "start_ns", "dur_ns", "source", "seq",
            "peer", "p2p", "splits", "tid"]


@dataclass
class MatchReport:
    """How the collectives were matched: their groups' provenance, the fallback used, what was refused."""

    events: int = 0
    with_group: int = 0  # collective (not P2P) events whose group is known
    alignment: Alignment = field(default_factory=Alignment)
    p2p_events: int = 0
    p2p_paired: int = 0

    @property
    def fallback(self) -> bool:
        """No collective event names its group: matched by name and order over all ranks."""
        return self.events > self.p2p_events and self.with_group == 0


def _events(store: Store) -> pd.DataFrame:
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
    candidates = candidates.assign(source=source.to_numpy(), collective=candidates["collective"].astype(str))
    candidates = candidates[candidates["source"] != ""]
    candidates = fill_groups(candidates, store.run_info.process_groups)
    priority = {"gpu_kernel": 0, "gloo": 1, "c10d": 2, "nccl_annotation": 3, "record_param_comms": 4}
    rank_best = candidates.assign(prio=candidates["source"].map(priority)).groupby(["rank", "window"])["prio"].min()
    prio = candidates["source"].map(priority).to_numpy()
    best = rank_best.reindex(pd.MultiIndex.from_arrays([candidates["rank"], candidates["window"]])).to_numpy()
    chosen = candidates[prio == best]
    out = chosen.assign(p2p=chosen["collective"].isin(P2P_COLLECTIVES).to_numpy())[_COLUMNS].copy()
    out["collective"] = out["collective"].replace("", "unknown")
    out = out.astype({"pg": str, "splits": str, "peer": np.int32})
    out["end_ns"] = out["start_ns"] + out["dur_ns"]
    issued = candidates[candidates["source"] == "c10d"]
    if not issued.empty and (out["source"] == "gloo").any():
        out = _arrive_at_issue(out, issued)
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def _arrive_at_issue(out: pd.DataFrame, issued: pd.DataFrame) -> pd.DataFrame:
    """gloo runs a rank's collectives one after another on its own thread, so a gloo:* span starts when
    the previous one ended (at the same time on every rank). The rank *arrived* when its main thread
    issued the c10d:: op: pair the k-th issue with the k-th execution and start there (a P2P op's peer and
    the issued op's splits come from the c10d:: op too)."""
    keys = ["rank", "window", "step", "collective"]
    issue = issued.sort_values("start_ns", kind="stable")
    issue = issue.assign(k=issue.groupby(keys, observed=True).cumcount())[[*keys, "k", "start_ns", "peer", "splits"]]
    issue = issue.rename(columns={"start_ns": "issued_ns", "peer": "issued_peer", "splits": "issued_splits"})
    out = out.sort_values("start_ns", kind="stable")
    out = out.assign(k=out.groupby(keys, observed=True).cumcount())
    merged = out.merge(issue, on=[*keys, "k"], how="left")
    gloo = (merged["source"] == "gloo") & merged["issued_ns"].notna()
    issued_ns = merged["issued_ns"].fillna(0).astype(np.int64)
    earlier = gloo & (issued_ns < merged["start_ns"])
    merged.loc[earlier, "start_ns"] = issued_ns[earlier]
    merged["dur_ns"] = merged["end_ns"] - merged["start_ns"]
    peer = merged["issued_peer"].fillna(-1).astype(np.int32)
    take = gloo & (merged["peer"] < 0) & (peer >= 0)
    merged.loc[take, "peer"] = peer[take]
    splits = merged["issued_splits"].astype(str)
    take = gloo & (merged["splits"] == "") & merged["issued_splits"].notna() & (splits != "")
    merged.loc[take, "splits"] = splits[take]
    return merged.drop(columns=["k", "issued_ns", "issued_peer", "issued_splits"])


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in [*_COLUMNS, "end_ns"]})
    return frame.astype({"rank": np.int32, "peer": np.int32, "p2p": bool, "start_ns": np.int64, "end_ns": np.int64,
                         "dur_ns": np.int64})


def match_instances(coll: pd.DataFrame, groups: dict[str, ProcessGroup] | None = None,
                    report: MatchReport | None = None) -> pd.DataFrame:
    """Add `instance` (an id shared by the same collective on every member) and `members`.

    Collectives are matched inside their group in the group's order (`alignment`), P2P ops as pairs (`match_pairs`).
    Only instances seen on at least two ranks are kept.
    """
    report = report if report is not None else MatchReport()
    if coll.empty:
        return coll.assign(instance=pd.Series(dtype=np.int64), members=pd.Series(dtype=np.int64))
    if "p2p" not in coll:
        coll = coll.assign(p2p=coll["collective"].isin(P2P_COLLECTIVES), peer=np.int32(-1))
    p2p = coll["p2p"].to_numpy(dtype=bool)
    report.events, report.p2p_events = len(coll), int(p2p.sum())
    colls = coll[~p2p]
    report.with_group = int((colls["pg"].astype(str) != "").sum())
    colls = _inside_groups(colls, groups or {})
    colls, report.alignment.by_seq = order_keys(colls)
    colls, report.alignment = realign(colls)
    report.alignment.by_seq = int(colls["by_seq"].sum()) if len(colls) else 0
    colls = colls.assign(instance=colls.groupby(instance_keys(colls), sort=True, observed=True).ngroup())
    # A rank seen twice in one instance (two windows of one step) keeps its first occurrence.
    colls = colls.drop_duplicates(["instance", "rank"], keep="first")
    colls = colls.assign(members=colls.groupby("instance")["rank"].transform("nunique"))
    colls = colls[colls["members"] >= 2].drop(columns=["k", "by_seq"])
    first = int(colls["instance"].max()) + 1 if len(colls) else 0
    pairs = match_pairs(coll[p2p], first)
    report.p2p_paired = len(pairs)
    out = pd.concat([colls, pairs], ignore_index=True) if len(pairs) else colls.reset_index(drop=True)
    return out


def _inside_groups(colls: pd.DataFrame, groups: dict[str, ProcessGroup]) -> pd.DataFrame:
    """Events of ranks that are not members of the group they name are left out."""
    members = {name: g.ranks for name, g in groups.items() if g.ranks}
    if not members or colls.empty:
        return colls
    pg = colls["pg"].astype(str).to_numpy()
    rank = colls["rank"].to_numpy()
    inside = np.ones(len(colls), dtype=bool)
    for name in set(pg.tolist()) & set(members):
        at = pg == name
        inside[at] = np.isin(rank[at], members[name])
    return colls[inside]


def match_pairs(p2p: pd.DataFrame, first_instance: int) -> pd.DataFrame:
    """The send/recv rows that pair up (the k-th send from s to r in a step is the k-th recv at r from s), with
    `instance` (from `first_instance` on) and `members` (2)."""
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
    """`frame` (arrivals with `start_aligned`) with the P2P rows' waits set (the receiver waits for the send, the
    sender for no one), and no last member or lateness."""
    p2p = frame["p2p"].to_numpy()
    if not p2p.any():
        return frame
    rows = frame[p2p]
    send_start = rows["start_aligned"].where(rows["collective"] == "send").groupby(rows["instance"]).transform("max")
    is_send = (rows["collective"] == "send").to_numpy()
    recv_wait = (send_start - rows["start_aligned"]).clip(lower=0)
    idx = frame.index[p2p]
    for column, value in (("lateness_ns", 0), ("wait_ns", np.where(is_send, 0, recv_wait).astype(np.int64)),
                          ("own_ns", 0.0), ("is_last", False), ("gap_to_next_ns", 0)):
        frame.loc[idx, column] = value
    return frame


def clock_offsets(matched: pd.DataFrame, iterations: int = 20) -> pd.Series:
    """Per-rank clock offset in ns (relative to the job's median clock), from collective end times. Iterated
    until it converges (below a microsecond): with real end-time jitter and skews of tens of ms between hosts,
    3 rounds left estimates 0.6 ms off and not shifting with the skew (tests/lab); about 10 converge."""
    if "p2p" in matched:
        matched = matched[~matched["p2p"].to_numpy(dtype=bool)]  # a send's end is not its recv's end
    if matched.empty:
        return pd.Series(dtype=np.int64)
    offsets = pd.Series(0.0, index=sorted(matched["rank"].unique()))
    at, end = np.searchsorted(offsets.index.to_numpy(), matched["rank"].to_numpy()), matched["end_ns"].to_numpy()
    frame = pd.DataFrame({"instance": matched["instance"].to_numpy(), "rank": matched["rank"].to_numpy()})
    by_instance, by_rank = frame.groupby("instance"), frame.groupby("rank")  # grouped once, not every round
    for _ in range(iterations):
        frame["aligned"] = end - offsets.to_numpy()[at]
        frame["residual"] = frame["aligned"] - by_instance["aligned"].transform("median")
        residual = by_rank["residual"].median()
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
    if "p2p" in frame:
        frame = pair_arrivals(frame)
    return frame.sort_values(["instance", "rank"]).reset_index(drop=True)


def aligned_arrivals(store: Store, report: MatchReport | None = None) -> tuple[pd.DataFrame, ClockDomains]:
    """(arrivals per instance and rank, the ranks' clock domains and offsets: `clock_domains`)."""
    report = report if report is not None else MatchReport()
    events = _events(store)
    matched = match_instances(events, store.run_info.process_groups, report)
    collectives = matched[~matched["p2p"].to_numpy(dtype=bool)] if "p2p" in matched else matched
    domains = clock_domains(store, collectives, clock_offsets(collectives))
    return arrivals(matched, domains.offsets), domains


@dataclass(frozen=True)
class CollectiveArrivals:
    """Arrivals per matched collective instance and rank, on clocks aligned by `offsets` (ns per rank)."""

    arrivals: pd.DataFrame
    offsets: pd.Series
    domains: ClockDomains | None = None
    report: MatchReport | None = None  # how they were matched (groups, fallback, refused members)


def arrivals_view(analysis: Analysis) -> CollectiveArrivals:
    """The run's collective arrivals (see `aligned_arrivals`)."""
    report = MatchReport()
    arr, domains = aligned_arrivals(analysis.store, report)
    return CollectiveArrivals(arr, domains.offsets, domains, report)


def matching_findings(seen: CollectiveArrivals) -> list[Finding]:
    """Info findings on how collectives were matched, where it matters: the fallback used when no event names
    its process group, and the members refused or realigned because they were not the same collective."""
    report = seen.report
    if report is None or report.events == 0:
        return []
    found: list[Finding] = []
    if report.fallback:
        found.append(Finding(
            analyzer="straggler", severity=Severity.INFO,
            title="Collectives matched by name and order across all ranks: the traces name no process group",
            recommendation="Context: without groups, collectives of different sub-groups (tensor, pipeline, data "
            "parallel) that run at the same time can be taken for one. Record with a PyTorch whose traces carry "
            "record_param_comms (NCCL) or distributedInfo.pg_config, so each collective is matched inside its group.",
            evidence=StragglerEvidence(collective_events=report.events - report.p2p_events, fallback="name_and_order"),
            key="straggler:matching:fallback"))
    align = report.alignment
    if align.mismatched:
        found.append(Finding(
            analyzer="straggler", severity=Severity.INFO,
            title=(f"{align.mismatched} collective instance(s) matched by position had members that are not the same "
                   f"collective (their sizes differ): {align.realigned} event(s) realigned by name and size, "
                   f"{align.refused} left out of the timing"),
            recommendation="Context: the ranks' traces do not start at the same collective (a different number of "
            "early collectives was dropped), or they come from different jobs. Clock offsets and lateness are "
            "computed only from instances whose members agree; record all ranks over the same steps.",
            evidence=StragglerEvidence(mismatched_instances=align.mismatched, realigned_events=align.realigned,
                                       refused_events=align.refused, groups=list(align.groups)),
            key="straggler:matching:mismatch"))
    return found
