"""The bus bandwidth a job measured (`measured_busbw`): nccl-tests tables and NCCL Inspector records, as typed
rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from perftracker.store import Store


@dataclass(frozen=True)
class Measure:
    """One measured bus bandwidth: where from, what, its peak GB/s and the size it was reached at."""

    source: str  # nccl_tests | inspector
    what: str  # the test (all_reduce_perf) or the Inspector collective (AllReduce in comm 0x...)
    busbw_gbs: float
    size_bytes: int
    where: str  # file:line
    gpus: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    nranks: int = -1
    wrong: int = 0  # values nccl-tests found wrong (out-of-place and in-place, N/A not counted)
    avg_busbw_gbs: float = float("nan")


def _tests(frame: pd.DataFrame) -> Iterator[Measure]:
    if frame.empty:
        return
    for (file, index), rows in frame.groupby(["file", "test_index"], sort=True):
        best = rows[["oop_busbw", "ip_busbw"]].max(axis=1).fillna(-1.0)
        peak = rows.iloc[int(best.to_numpy().argmax())]
        wrong = int(rows["oop_wrong"].clip(lower=0).sum() + rows["ip_wrong"].clip(lower=0).sum())
        gpus = tuple(sorted({g for v in rows["gpus"].dropna() for g in str(v).split(",") if g}))
        hosts = tuple(sorted({h for v in rows["hosts"].dropna() for h in str(v).split(",") if h}))
        yield Measure("nccl_tests", str(peak["test"]) or f"test {int(str(index)) + 1}", float(best.max()),
                      int(peak["size_bytes"]), f"{file}:{int(peak['line'])}", gpus, hosts,
                      int(peak["nranks"]), wrong, float(peak["avg_busbw"]))


def _inspector(frame: pd.DataFrame) -> Iterator[Measure]:
    if frame.empty or "busbw_gbs" not in frame:
        return
    coll = frame[(frame["kind"].astype(str) == "coll") & frame["busbw_gbs"].notna()]
    for (comm, op), rows in coll.groupby([coll["comm_id"].astype(str), coll["op"].astype(str)], sort=True):
        peak = rows.iloc[int(rows["busbw_gbs"].to_numpy().argmax())]
        hosts = tuple(sorted({str(h) for h in rows["host"].dropna()}))
        yield Measure("inspector", f"{op} in communicator {comm}", float(peak["busbw_gbs"]),
                      int(peak["bytes"]), str(peak["file"]), (), hosts, int(peak["comm_size"]))


def measured_busbw(store: Store) -> list[Measure]:
    """Every nccl-tests test's and Inspector collective's peak bus bandwidth (docs/internals/analyzers.md)."""
    return [*_tests(store["nccl_tests"]), *_inspector(store["nccl_collectives"])]
