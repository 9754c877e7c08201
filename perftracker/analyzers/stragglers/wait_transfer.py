"""Waiting and transfer at every matched collective: the one home of the split.

wait + transfer = the rank's duration, by the aligned clocks (`aligned`) or the instance's shortest duration
(`shortest`). Views: `collective_split_view`, `step_waits_view`, `kernel_waits_view`; `inspector_split`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.health.bandwidth import bus_factor
from perftracker.analyzers.nccl.collective_timing import inspector_collectives_view
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.thresholds import threshold_int

SPLIT_COLUMNS = ["instance", "step", "pg", "collective", "source", "rank", "window", "start_ns", "arrival_ns",
                 "dur_ns", "wait_ns", "transfer_ns", "basis", "last_rank", "members", "bytes", "algbw_gbs",
                 "busbw_gbs"]
STEP_COLUMNS = ["step", "rank", "collectives", "comm_ns", "wait_ns", "transfer_ns", "caused_ns", "times_last"]


def split(arr: pd.DataFrame, trusted: pd.Series) -> pd.DataFrame:
    """`arr` (`collectives.arrivals`) with wait_ns / transfer_ns / basis / last_rank per row (see the module
    docstring). `trusted`: per rank, whether its clock is aligned with the others'."""
    if arr.empty:
        return pd.DataFrame(columns=SPLIT_COLUMNS)
    frame = arr.copy()
    dur = frame["dur_ns"].to_numpy(np.int64)
    aligned_ok = frame["rank"].map(trusted).fillna(False).astype(bool)
    instance_ok = aligned_ok.groupby(frame["instance"]).transform("all").to_numpy(bool)
    last_arrival = frame.groupby("instance")["start_aligned"].transform("max").to_numpy(np.int64)
    by_clock = np.clip(last_arrival - frame["start_aligned"].to_numpy(np.int64), 0, dur)
    shortest = frame.groupby("instance")["dur_ns"].transform("min").to_numpy(np.int64)
    by_duration = np.clip(dur - shortest, 0, dur)
    wait = np.where(instance_ok, by_clock, by_duration).astype(np.int64)
    frame["wait_ns"] = wait
    frame["transfer_ns"] = dur - wait
    frame["basis"] = np.where(instance_ok, "aligned", "shortest")
    frame["arrival_ns"] = frame["start_aligned"].astype(np.int64)
    last = frame[frame["is_last"]].drop_duplicates("instance").set_index("instance")["rank"]
    frame["last_rank"] = frame["instance"].map(last).fillna(-1).astype(np.int64)
    transfer = frame.groupby("instance")["transfer_ns"].transform("median").to_numpy(float)
    return _with_bandwidth(frame, frame.groupby("instance")["bytes"].transform("max").to_numpy(float), transfer)


def _with_bandwidth(frame: pd.DataFrame, size: np.ndarray, transfer: np.ndarray) -> pd.DataFrame:
    """`frame` with algbw_gbs (bytes per ns = GB/s) and busbw_gbs, as SPLIT_COLUMNS sorted by instance and rank."""
    factor = np.array([bus_factor(str(c), int(n)) for c, n in zip(frame["collective"], frame["members"])])
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((size > 0) & (transfer > 0), size / transfer, np.nan)
    frame["algbw_gbs"], frame["busbw_gbs"] = algbw, algbw * factor
    return frame[SPLIT_COLUMNS].sort_values(["instance", "rank"], kind="stable").reset_index(drop=True)


def trusted_clocks(arr: pd.DataFrame, hosts: dict[int, str]) -> pd.Series:
    """Per rank: True when its clock can be aligned with the others' (docs/internals/stepgraph.md)."""
    if arr.empty:
        return pd.Series(dtype=bool)
    counts = arr.groupby("rank")["instance"].nunique()
    known = {r: h for r, h in hosts.items() if h}
    one_host = len(set(known.values())) == 1 and set(known) >= {int(r) for r in counts.index}
    return pd.Series((counts.to_numpy() >= threshold_int("waits.align_min_collectives")) | one_host,
                     index=[int(str(r)) for r in counts.index], dtype=bool)


def collective_split_view(analysis: Analysis) -> pd.DataFrame:
    """Per (matched collective, rank): arrival, wait, transfer (wait + transfer = duration; `basis` aligned or
    shortest) and bandwidth; from the traces, else from NCCL Inspector's records (`inspector_split`)."""
    seen = analysis.view(arrivals_view)
    arr = seen.arrivals
    if arr.empty:
        return inspector_split(analysis.view(inspector_collectives_view))
    domain = seen.domains.domain if seen.domains is not None else {}  # one host name, several clocks: apart
    hosts = {int(r): domain.get(int(r)) or analysis.store.host_of(int(r)) for r in arr["rank"].unique()}
    return split(arr, trusted_clocks(arr, hosts))


def inspector_split(records: pd.DataFrame) -> pd.DataFrame:
    """NCCL Inspector's per-rank kernel times (`nccl.collective_timing.inspector_collectives_view`) split by the
    shortest duration (Inspector gives no start times: a rank's kernel runs from its arrival to the common end,
    so the member with the shortest kernel arrived last and its time is the transfer); arrival_ns is -1."""
    rows = records[records.groupby(["comm_id", "seq"])["rank"].transform("size") >= 2] if not records.empty else records
    if rows.empty:
        return pd.DataFrame(columns=SPLIT_COLUMNS)
    dur = (rows["dur_s"] * 1e9).round().astype(np.int64)
    frame = pd.DataFrame({"instance": rows.groupby(["comm_id", "seq"], sort=True).ngroup().to_numpy(), "step": -1,
                          "pg": rows["comm_name"].to_numpy(), "collective": rows["op"].to_numpy(),
                          "source": "nccl_inspector", "rank": rows["rank"].astype(np.int64).to_numpy(), "window": 0,
                          "start_ns": -1, "arrival_ns": -1, "dur_ns": dur.to_numpy(),
                          "members": rows.groupby(["comm_id", "seq"])["rank"].transform("size").to_numpy(),
                          "bytes": rows["bytes"].to_numpy()})
    shortest = frame.groupby("instance")["dur_ns"].transform("min")
    frame["wait_ns"] = frame["dur_ns"] - shortest
    frame["transfer_ns"] = shortest
    frame["basis"] = "shortest"
    last = frame.loc[frame.groupby("instance")["dur_ns"].idxmin(), ["instance", "rank"]].set_index("instance")["rank"]
    frame["last_rank"] = frame["instance"].map(last).astype(np.int64)
    return _with_bandwidth(frame, frame["bytes"].to_numpy(float), shortest.to_numpy(float))


def step_waits(table: pd.DataFrame) -> pd.DataFrame:
    """Per (step, rank) of `split`'s table: collectives, their time, wait, transfer, the waiting it caused."""
    if table.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    own = table.groupby(["step", "rank"]).agg(collectives=("instance", "size"), comm_ns=("dur_ns", "sum"),
                                              wait_ns=("wait_ns", "sum"), transfer_ns=("transfer_ns", "sum"))
    per_instance = table.groupby("instance").agg(step=("step", "first"), last_rank=("last_rank", "first"),
                                                 total_wait=("wait_ns", "sum"))
    per_instance = per_instance[per_instance["last_rank"] >= 0]
    caused = per_instance.groupby(["step", "last_rank"]).agg(caused_ns=("total_wait", "sum"),
                                                             times_last=("total_wait", "size"))
    caused.index = caused.index.set_names(["step", "rank"])
    out = own.join(caused, how="left").fillna({"caused_ns": 0, "times_last": 0}).reset_index()
    return out.astype(dict.fromkeys(STEP_COLUMNS, np.int64))[STEP_COLUMNS]


def step_waits_view(analysis: Analysis) -> pd.DataFrame:
    """`step_waits` of the run's collectives."""
    return step_waits(analysis.view(collective_split_view))


def kernel_waits_view(analysis: Analysis) -> pd.DataFrame:
    """Per GPU communication kernel matched across ranks: rank, window, start_ns, dur_ns and its wait_ns."""
    table = analysis.view(collective_split_view)
    gpu = table[(table["source"] == "gpu_kernel") & (table["wait_ns"] > 0)]
    return gpu[["rank", "window", "start_ns", "dur_ns", "wait_ns"]].reset_index(drop=True)
