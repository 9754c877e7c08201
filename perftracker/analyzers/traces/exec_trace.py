"""Execution traces (PyTorch / Chakra ET) joined to the Kineto traces' ops, or said not to be used.

`exec_ops_view(analysis)` joins each ET's operators (the `exec_ops` table) to the rank window whose CPU ops
share the most of them by record-function id (ET `rf_id` = Kineto "External id") and name.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import NO_ACTION, Finding, Kind, Severity
from perftracker.analyzers.traces.gpu_time import as_int
from perftracker.evidence.traces import InputsEvidence

COLUMNS = ["file", "rank", "window", "rf_id", "name", "matched", "input_shapes", "input_types"]
_OP_KINDS = ("cpu_op", "annotation", "collective_cpu")


def exec_ops_view(analysis: Analysis) -> pd.DataFrame:
    """Every ET operator with the rank window it joined (docs/internals/analyzers.md)."""
    et = analysis.store["exec_ops"]
    if et.empty:
        return pd.DataFrame(columns=COLUMNS)
    ops = analysis.store.select_events(
        lambda ev: ((ev["stream"] < 0) & ev["kind"].isin(_OP_KINDS) & (ev["external_id"] >= 0)).to_numpy(),
        read_columns=["rank", "window", "stream", "kind", "external_id", "name"])
    keys = pd.DataFrame({"rank": ops["rank"].to_numpy(), "window": ops["window"].to_numpy(),
                         "rf_id": ops["external_id"].to_numpy(), "name": ops["name"].astype(str).to_numpy()})
    keys = keys.drop_duplicates(["rank", "window", "rf_id", "name"])
    frames = []
    for _, nodes in et.groupby("file", sort=True):
        nodes = nodes.assign(name=nodes["name"].astype(str), rf_id=nodes["rf_id"].astype("int64"))
        hits = nodes.merge(keys, on=["rf_id", "name"], how="inner")
        if hits.empty:
            frames.append(nodes.assign(rank=-1, window=-1, matched=False))
            continue
        best = hits.groupby(["rank", "window"]).size().sort_values(ascending=False).index[0]
        joined = set(hits.loc[(hits["rank"] == best[0]) & (hits["window"] == best[1]), "rf_id"])
        frames.append(nodes.assign(rank=as_int(best[0]), window=as_int(best[1]),
                                   matched=nodes["rf_id"].isin(joined)))
    return pd.concat(frames, ignore_index=True)[COLUMNS]


def op_shapes(analysis: Analysis) -> dict[tuple[int, int, int], str]:
    """Input shapes (JSON text) of each Kineto op an ET joined, keyed (rank, window, external_id)."""
    joined = analysis.view(exec_ops_view)
    joined = joined[joined["matched"].astype(bool)]
    return {(as_int(r), as_int(w), as_int(i)): str(s)
            for r, w, i, s in zip(joined["rank"], joined["window"], joined["rf_id"], joined["input_shapes"])}


def execution_trace_findings(analysis: Analysis) -> list[Finding]:
    """One info finding per execution trace: joined to which rank, or not used and why."""
    joined = analysis.view(exec_ops_view)
    findings = []
    for file, nodes in joined.groupby("file", sort=True):
        name = Path(str(file)).name
        matched = int(nodes["matched"].astype(bool).sum())
        if matched:
            rank = as_int(nodes["rank"].iloc[0])
            title = (f"Execution trace {name} joined to rank {rank}'s trace: {matched} of {len(nodes)} operators "
                     "matched by record-function id and name; their input shapes annotate the CPU ops findings name")
            advice = NO_ACTION
        else:
            title = (f"Execution trace {name} is not used: none of its {len(nodes)} operators matches an op of the "
                     "traces by record-function id and name")
            advice = ("The execution trace was probably taken in another process or profiling window than the "
                      "traces given. Record both in the same window: torch.profiler.profile(..., "
                      "execution_trace_observer=ExecutionTraceObserver().register_callback(path)).")
        findings.append(Finding(Kind.INPUTS, Severity.INFO, title, advice,
                                InputsEvidence(file=str(file), operators=len(nodes), matched=matched,
                                               rank=as_int(nodes["rank"].iloc[0]) if matched else None),
                                key=f"inputs:execution-trace:{name}"))
    return findings
