"""One rank's rows of an export as the Store's `events` and `steps` tables, as the Kineto path makes them.

Promise: `build_rank_tables(parts, names, comm_kernels, rank)` returns (events, steps) conforming to
`store/schema.py`, each event kinded and given its step as `kineto.py` would. Mapping:
docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from perftracker.collectors.traces.comm_kernels import CommKernels
from perftracker.collectors.traces.kineto import KIND_CODE as KIND
from perftracker.collectors.traces.kineto import KIND_NAMES as KINDS
from perftracker.collectors.traces.kineto import assign_steps, collective_of, comm_families
from perftracker.store.schema import conform

_VERSION_SUFFIX = re.compile(r"_v\d{1,6}$")
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
               9: "HtoH", 10: "PtoP"}
_SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}


@dataclass
class Part:
    """Rows of one kind for one rank: name texts by code, and int64 columns."""

    kind: npt.NDArray[np.int64]  # code into KINDS, per row
    name: npt.NDArray[np.int64]  # code into the export's name list, per row
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    device: npt.NDArray[np.int64]
    stream: npt.NDArray[np.int64]  # -1 for CPU rows
    tid: npt.NDArray[np.int64]
    correlation: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]  # step number for step ranges, -2 for the user's step range, else -1


def runtime_name(text: str) -> str:
    return _VERSION_SUFFIX.sub("", text)


def copy_name(kind: int) -> str:
    return f"Memcpy {_COPY_KINDS.get(kind, 'Unknown')}"


def sync_name(kind: int) -> str:
    return _SYNC_NAMES.get(kind, "Synchronization")


def build_rank_tables(parts: list[Part], names: list[str], comm_kernels: CommKernels,
                      rank: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events, steps) of one rank from its parts, their names codes into `names` (see the module's promise)."""
    order = np.argsort(_cat(parts, "start"), kind="stable")  # events in time order, as a trace holds them
    kind, start, end = _cat(parts, "kind")[order], _cat(parts, "start")[order], _cat(parts, "end")[order]
    stream, corr = _cat(parts, "stream")[order], _cat(parts, "correlation")[order]
    present, inverse = np.unique(_cat(parts, "name")[order], return_inverse=True)
    codes = inverse.reshape(-1).astype(np.int64)
    values = [names[i] for i in present.tolist()]
    family_code, families = comm_families(kind, codes, values, comm_kernels)
    collectives = ["", *sorted({collective_of(v) for v in values} - {""})]
    coll_code = np.array([collectives.index(collective_of(v)) for v in values], dtype=np.int64)
    relevant = (kind == KIND["comm"]) | (kind == KIND["collective_cpu"])
    steps = _steps(_cat(parts, "step")[order], start, end, stream, rank)
    events = pd.DataFrame({
        "rank": rank, "window": 0, "device": _cat(parts, "device")[order], "stream": stream,
        "tid": _cat(parts, "tid")[order],
        "kind": pd.Categorical.from_codes(kind, dtype=pd.CategoricalDtype(list(KINDS))),
        "name": pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(values)),
        "start_ns": start, "dur_ns": end - start, "step": assign_steps(steps, stream, start, corr, unlaunched_in_no_step=False),
        "correlation": corr, "external_id": -1,
        "collective": pd.Categorical.from_codes(np.where(relevant, coll_code[codes], 0),
                                                dtype=pd.CategoricalDtype(collectives)),
        "bytes": _cat(parts, "nbytes")[order], "pg": "", "group_size": -1,
        "comm_family": pd.Categorical.from_codes(family_code, dtype=pd.CategoricalDtype(families)),
    })
    return conform("events", events), conform("steps", steps)


def _cat(parts: list[Part], column: str) -> npt.NDArray[np.int64]:
    arrays = [getattr(p, column) for p in parts]
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)


def _steps(mark: npt.NDArray[np.int64], start: npt.NDArray[np.int64], end: npt.NDArray[np.int64],
           stream: npt.NDArray[np.int64], rank: int) -> pd.DataFrame:
    """Step ranges (CPU side) as steps: numbered ones by their number (the first of each), the user's
    chosen range numbered 0, 1, ... in order of start."""
    numbered = np.flatnonzero((stream < 0) & (mark >= 0))
    user = np.flatnonzero((stream < 0) & (mark == -2))
    user = user[np.argsort(start[user], kind="stable")]
    number = np.concatenate([mark[numbered], np.arange(len(user), dtype=np.int64)])
    rows = np.concatenate([numbered, user])
    steps = pd.DataFrame({"rank": rank, "window": 0, "step": number, "start_ns": start[rows],
                          "dur_ns": end[rows] - start[rows], "source": "nvtx"})
    return steps.sort_values("start_ns", kind="stable").drop_duplicates("step", keep="first").reset_index(drop=True)
