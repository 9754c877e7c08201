"""Expert parallelism: how evenly all-to-all exchanges spread tokens, and what the imbalance costs.

`alltoall_exchanges`, `alltoall_bytes_view` (the rank-to-rank matrix) and `analyze_expert_balance` (a few ranks
receiving most tokens in most all-to-alls, and the wait it causes).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import fmt_ms, hosts_of, rank_list, step_seconds
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.steps import ExpertBalanceEvidence
from perftracker.store.run_info import ProcessGroup

_COLUMNS = ["instance", "step", "sender", "receiver", "rows", "bytes"]


def _splits(text: str) -> tuple[list[int], list[int]]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return [], []
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, list) for v in value):
        return ([int(x) for x in value[0] if isinstance(x, int)], [int(x) for x in value[1] if isinstance(x, int)])
    return [], []


def alltoall_exchanges(arr: pd.DataFrame, groups: dict[str, ProcessGroup]) -> pd.DataFrame:
    """Rows (and bytes, -1 when unknown) each member of each matched all-to-all sent to each other member."""
    if arr.empty or "splits" not in arr:
        return pd.DataFrame(columns=_COLUMNS)
    a2a = arr[(arr["collective"] == "all_to_all") & (arr["splits"].astype(str) != "")]
    out = []
    ranks_of = {int(str(i)): sorted(int(r) for r in ranks) for i, ranks in a2a.groupby("instance")["rank"]}
    cols = zip(a2a["instance"].tolist(), a2a["step"].tolist(), a2a["rank"].tolist(), a2a["pg"].astype(str).tolist(),
               a2a["bytes"].tolist(), a2a["splits"].astype(str).tolist())
    for instance, step, rank, pg, size, text in cols:
        sent, _ = _splits(text)
        group = groups.get(pg)
        members = list(group.ranks) if group and group.ranks else ranks_of[instance]
        if not sent or len(sent) != len(members):
            continue
        total = sum(sent)
        per_row = float(size) / total if total > 0 and int(size) > 0 else -1.0
        for receiver, rows in zip(members, sent):
            out.append((int(instance), int(step), int(rank), int(receiver), int(rows),
                        int(round(rows * per_row)) if per_row > 0 else -1))
    return pd.DataFrame(out, columns=_COLUMNS)


def alltoall_bytes_view(analysis: Analysis) -> pd.DataFrame:
    """Per (sender, receiver): rows and bytes sent over every matched all-to-all, and its share of the total."""
    ex = alltoall_exchanges(analysis.view(arrivals_view).arrivals, analysis.store.run_info.process_groups)
    if ex.empty:
        return pd.DataFrame(columns=["sender", "receiver", "rows", "bytes", "share_pct"])
    table = ex.groupby(["sender", "receiver"], as_index=False).agg(rows=("rows", "sum"), bytes=("bytes", "sum"))
    table.loc[table["bytes"] < 0, "bytes"] = -1
    table["share_pct"] = (100.0 * table["rows"] / max(int(table["rows"].sum()), 1)).round(2)
    return table


def analyze_expert_balance(analysis: Analysis) -> list[Finding]:
    """A finding when a few ranks receive most all-to-all tokens (expert-parallel load imbalance)."""
    seen = analysis.view(arrivals_view)
    ex = alltoall_exchanges(seen.arrivals, analysis.store.run_info.process_groups)
    if ex.empty:
        return []
    received = ex.groupby(["instance", "receiver"])["rows"].sum().unstack(fill_value=0)
    mean = received.mean(axis=1).replace(0, np.nan)
    ratio = received.div(mean, axis=0)
    imbalance = ratio.max(axis=1).dropna()
    heavy_share = (ratio >= threshold("expert.heavy_ratio")).mean()  # per rank: the share of all-to-alls in which it is heavy
    heavy = sorted(int(str(r)) for r in heavy_share[heavy_share >= threshold("expert.heavy_share")].index)
    if not heavy or len(heavy) > max(1, received.shape[1] // 4):
        return []
    arr = seen.arrivals
    caused = arr[arr["is_last"] & arr["rank"].isin(heavy) & ~arr["p2p"]] if "p2p" in arr else arr.iloc[:0]
    per_step = caused.groupby("step")["gap_to_next_ns"].sum() / 1e9
    steps = max(int(arr["step"].nunique()), 1)
    cost = float(per_step.sum()) / steps
    step_s = float(step_seconds(analysis.store).median()) if not analysis.store.steps.empty else 0.0
    share = cost / step_s if step_s > 0 else 0.0
    tokens = received[heavy].to_numpy().sum() / max(float(received.to_numpy().sum()), 1.0)
    severity = Severity.WARNING if share >= threshold("expert.warn_share") else Severity.INFO
    return [Finding(
        analyzer="expert_balance", severity=severity,
        title=(f"Rank{'s' if len(heavy) > 1 else ''} {rank_list(heavy)} receive{'' if len(heavy) > 1 else 's'} "
               f"{100 * tokens:.0f}% of all-to-all tokens ({len(heavy)} of {received.shape[1]} ranks; the busiest "
               f"gets {float(imbalance.median()):.1f}x the mean): the others wait {fmt_ms(cost)} per step for "
               f"{'them' if len(heavy) > 1 else 'it'}"),
        recommendation="Expert-parallel load imbalance: the experts on these ranks get most tokens, so they compute "
        "longest and the all-to-all after them waits. Balance the router (auxiliary load-balancing loss, capacity "
        "factor, token dropping) or place popular experts on more ranks.",
        evidence=ExpertBalanceEvidence(
            heavy_ranks=heavy, token_share=round(float(tokens), 4), imbalance_median=round(float(imbalance.median()), 3),
            imbalance_max=round(float(imbalance.max()), 3), alltoalls=int(len(imbalance)),
            wait_caused_ms_per_step=round(cost * 1e3, 3), wait_share_of_step=round(share, 4),
            received_rows={str(r): int(v) for r, v in received.sum().items()}),
        # the wait is the same time the straggler finding on these ranks costs: said here, counted there
        ranks=tuple(heavy), hosts=hosts_of(analysis.store, heavy),
        key="expert_balance:" + ",".join(map(str, heavy)), confidence=round(float(heavy_share[heavy].min()), 3))]
