"""Clock domains: which ranks read one clock, and the offset that aligns each rank.

`clock_domains(store, matched, raw)` pools one host's ranks on one offset, unless one host name hides several
clocks (then split where no single clock explains the collectives); `ClockDomains.split` names those hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perftracker.analyzers.common import rank_list
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.steps import StragglerEvidence
from perftracker.store import Store


@dataclass(frozen=True)
class SplitHost:
    """One host name whose ranks read different clocks: each group of ranks and its offset (ns) from the
    host's largest group (listed first)."""

    host: str
    groups: tuple[tuple[tuple[int, ...], int], ...]


@dataclass(frozen=True)
class ClockDomains:
    """The offset (ns, per rank) that aligns each rank, its clock domain's label, and the split hosts."""

    offsets: pd.Series
    domain: dict[int, str] = field(default_factory=dict)
    split: tuple[SplitHost, ...] = ()


def clock_domains(store: Store, matched: pd.DataFrame, raw: pd.Series) -> ClockDomains:
    """The ranks' clock domains and aligned offsets (docs/internals/stepgraph.md)."""
    if raw.empty:
        return ClockDomains(raw)
    ranks = [int(str(r)) for r in raw.index]
    hosts = {r: store.host_of(r) for r in ranks}
    result = raw.astype("float64").copy()
    domain = {r: hosts[r] for r in ranks}
    split: list[SplitHost] = []
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        if hosts[r]:
            by_host.setdefault(hosts[r], []).append(r)
    for host, members in sorted(by_host.items()):
        groups = _groups(matched, raw, members)
        for i, group in enumerate(groups):
            result[group] = float(raw[group].astype("float64").median())
            if len(groups) > 1:
                for r in group:
                    domain[r] = f"{host}#{i}"
        if len(groups) > 1:  # offsets from the host's largest group (ties: the one of the lowest rank)
            ordered = sorted(groups, key=lambda g: (-len(g), min(g)))
            base = float(result[ordered[0][0]])
            split.append(SplitHost(host, tuple((tuple(sorted(g)), int(round(float(result[g[0]]) - base)))
                                               for g in ordered)))
    aligned = (result - result.median()).round().astype("int64")
    return ClockDomains(aligned, domain, tuple(split))


def _groups(matched: pd.DataFrame, raw: pd.Series, members: list[int]) -> list[list[int]]:
    """The host's ranks in clock groups: sorted by their own offset, cut where two neighbours are at least the
    split gap apart and the collectives they share show two clocks; one group otherwise."""
    gap_ns = float(threshold("straggler.clock_split_ms")) * 1e6
    ordered = sorted(members, key=lambda r: float(raw[r]))
    groups: list[list[int]] = [[ordered[0]]]
    for r in ordered[1:]:
        if float(raw[r]) - float(raw[groups[-1][-1]]) >= gap_ns:
            groups.append([r])
        else:
            groups[-1].append(r)
    kept = [groups[0]]
    for group in groups[1:]:
        if _two_clocks(matched, kept[-1], group, gap_ns):
            kept.append(group)
        else:
            kept[-1] = kept[-1] + group
    return kept


def _two_clocks(matched: pd.DataFrame, left: list[int], right: list[int], gap_ns: float) -> bool:
    """Do the collectives `left` and `right` share show two clocks (an end before an arrival on one clock)?"""
    both = matched[matched["rank"].isin(left + right)]
    sides = both.assign(right=both["rank"].isin(right)).groupby("instance")["right"].nunique()
    shared = sides[sides == 2].index
    if len(shared) < threshold_int("straggler.clock_split_min_collectives"):
        return False
    rows = both[both["instance"].isin(shared)]
    per = rows.groupby("instance").agg(last_arrival=("start_ns", "max"), first_end=("end_ns", "min"))
    impossible = (per["last_arrival"] - per["first_end"]).to_numpy(dtype=np.float64) > gap_ns / 2
    return float(impossible.mean()) >= float(threshold("straggler.clock_split_share"))


def clock_domain_findings(domains: ClockDomains | None) -> list[Finding]:
    """One info finding per host name that hides several clocks: its ranks per clock and the offsets measured."""
    if domains is None:
        return []
    findings = []
    for split in domains.split[:16]:
        parts = [f"{'rank' if len(group) == 1 else 'ranks'} {rank_list(list(group))} at {offset / 1e6:+.2f} ms"
                 for group, offset in split.groups[:8]]
        ranks = tuple(sorted(r for group, _ in split.groups for r in group))
        findings.append(Finding(
            analyzer="straggler", severity=Severity.INFO,
            title=(f"Ranks {rank_list(list(ranks))} report one host name ({split.host}) but read "
                   f"{len(split.groups)} different clocks ({'; '.join(parts)}): aligned as separate clock domains"),
            recommendation="Context: on one clock a collective ends after its last member arrives; these ranks' "
            "collectives ended before others arrived, so they run on different machines (or clocks) behind one "
            "host name (containers or pods with repeated host names). Their times were aligned per clock domain, "
            "as for different hosts. Give each container a distinct host name to make this explicit.",
            evidence=StragglerEvidence(host=split.host, clock_domains=[
                {"ranks": list(group), "offset_ns": offset} for group, offset in split.groups[:64]],
                split_threshold_ms=threshold("straggler.clock_split_ms")),
            ranks=ranks, hosts=(split.host,), key=f"straggler:clock-domains:{split.host}",
        ))
    return findings
