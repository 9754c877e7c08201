"""Rank groups: how a report of many ranks bins them, by host where hosts are known."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from perftracker.analyzers.analysis import Analysis

MANY_RANKS = 64  # more ranks than this: distributions, top-k and rank groups instead of one item per rank
MAX_GROUPS = 64  # a binned chart has at most this many rows
GROUP_COLUMNS = ["rank", "host", "group", "group_label"]


def run_ranks(analysis: Analysis) -> list[int]:
    """Every rank the run's traces or step files name, sorted."""
    store = analysis.store
    ranks = {int(r) for r in store.ranks["rank"]} if not store.ranks.empty else set()
    if not store.steps.empty:
        ranks |= {int(r) for r in store.steps["rank"].unique()}
    return sorted(r for r in ranks if r >= 0)


def rank_hosts(analysis: Analysis) -> dict[int, str]:
    """Host of each traced rank whose host is known."""
    table = analysis.store.ranks
    if table.empty:
        return {}
    known = table[table["host"].notna() & (table["host"].astype(str) != "")]
    return {int(r): str(h) for r, h in zip(known["rank"], known["host"])}


def group_ranks(ranks: Sequence[int], hosts: Mapping[int, str], max_groups: int = MAX_GROUPS) -> pd.DataFrame:
    """rank, host, group (0..), group_label of each of `ranks` (docs/internals/analyzers.md)."""
    ordered = sorted(set(ranks))
    if not ordered:
        return pd.DataFrame(columns=GROUP_COLUMNS)
    host_order: list[str] = []
    for rank in ordered:  # hosts in the order of their lowest rank
        host = hosts.get(rank, "")
        if host and host not in host_order:
            host_order.append(host)
    if all(hosts.get(r) for r in ordered) and len(host_order) >= 2:
        per = math.ceil(len(host_order) / max_groups)
        index = {h: i // per for i, h in enumerate(host_order)}
        spans = {g: host_order[g * per:(g + 1) * per] for g in set(index.values())}
        labels = {g: s[0] if len(s) == 1 else f"{s[0]} .. {s[-1]} ({len(s)} hosts)" for g, s in spans.items()}
        groups = [index[hosts[r]] for r in ordered]
        return pd.DataFrame({"rank": ordered, "host": [hosts[r] for r in ordered], "group": groups,
                             "group_label": [labels[g] for g in groups]})
    per = math.ceil(len(ordered) / max_groups)
    groups = [i // per for i in range(len(ordered))]
    first = {g: ordered[g * per] for g in set(groups)}
    last = {g: ordered[min(len(ordered), (g + 1) * per) - 1] for g in set(groups)}
    labels = {g: (f"rank {first[g]}" if first[g] == last[g] else f"ranks {first[g]}-{last[g]}") for g in first}
    return pd.DataFrame({"rank": ordered, "host": [hosts.get(r, "") for r in ordered], "group": groups,
                         "group_label": [labels[g] for g in groups]})


def rank_groups_view(analysis: Analysis) -> pd.DataFrame:
    """The group of every rank of the run (`group_ranks`)."""
    return group_ranks(run_ranks(analysis), rank_hosts(analysis))


def rank_layout_view(analysis: Analysis) -> pd.DataFrame:
    """`layout` of the run's rank groups."""
    return layout(analysis.view(rank_groups_view))


def layout(groups: pd.DataFrame) -> pd.DataFrame:
    """One row: ranks, many (more than MANY_RANKS), threshold, groups, grouped_by (host | rank), largest group."""
    ranks = len(groups)
    by_host = bool(ranks) and bool((groups["host"] != "").all()) and groups["host"].nunique() >= 2
    return pd.DataFrame({"ranks": [ranks], "many": [ranks > MANY_RANKS], "threshold": [MANY_RANKS],
                         "groups": [int(groups["group"].nunique()) if ranks else 0],
                         "grouped_by": ["host" if by_host else "rank"],
                         "largest_group": [int(groups.groupby("group").size().max()) if ranks else 0]})
