"""The small per-run summaries a later `perftracker diff` compares, saved with every analysis.

`op_totals_view(analysis)`: per rank and CPU op / GPU kernel name, the total time, the calls and the profiled
steps.
"""

from __future__ import annotations

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.per_rank import by_rank

OP_KINDS = ("cpu_op", "compute", "comm", "memcpy", "memset", "collective_cpu", "gpu_annotation", "annotation")
OP_COLUMNS = ["rank", "kind", "name", "total_ns", "count", "steps"]
SETTING_COLUMNS = ["key", "value", "ranks", "source"]


def op_totals_view(analysis: Analysis) -> pd.DataFrame:
    """Per (rank, kind, name): total_ns, count, and the rank's number of profiled steps (0: no steps); computed
    a few ranks at a time over their own events (`per_rank.by_rank`)."""
    store = analysis.store
    if not store.n_events:
        return pd.DataFrame(columns=OP_COLUMNS)
    steps = store.steps
    profiled = steps[steps["source"].astype(str) == "profiler"].groupby("rank")["step"].nunique()

    def one_chunk(ranks: list[int], events: pd.DataFrame) -> pd.DataFrame:
        ops = events[events["kind"].isin(OP_KINDS).to_numpy()]
        grouped = ops.groupby(["rank", "kind", "name"], observed=True)["dur_ns"].agg(["sum", "size"]).reset_index()
        grouped = grouped.rename(columns={"sum": "total_ns", "size": "count"})
        grouped["steps"] = grouped["rank"].map(profiled).fillna(0).astype("int64")
        grouped["kind"] = grouped["kind"].astype(str)
        grouped["name"] = grouped["name"].astype(str)
        return grouped[OP_COLUMNS]

    return by_rank(store, one_chunk)


def settings_view(analysis: Analysis) -> pd.DataFrame:
    """Distinct (key, value) settings with the number of ranks that showed each, and the job's shape."""
    store = analysis.store
    rows: list[dict[str, object]] = []
    config = store["config"]
    if not config.empty:
        grouped = config.groupby(["key", "value"], observed=True).agg(
            ranks=("rank", "nunique"), source=("source", lambda s: ",".join(sorted({str(v) for v in s}))))
        flat = grouped.reset_index()
        rows += [{"key": str(r["key"]), "value": str(r["value"]), "ranks": int(r["ranks"]), "source": str(r["source"])}
                 for _, r in flat.iterrows()]
    ranks = store.ranks
    for column, key in (("world_size", "job.world_size"), ("backend", "job.backend"), ("device_name", "job.device")):
        if column in ranks and not ranks.empty:
            values = ranks[column].dropna()
            values = values[(values.astype(str) != "") & (values.astype(str) != "-1")]
            for value, count in values.astype(str).value_counts().items():
                rows.append({"key": key, "value": str(value), "ranks": int(count), "source": "trace"})
    return pd.DataFrame(rows, columns=SETTING_COLUMNS)
