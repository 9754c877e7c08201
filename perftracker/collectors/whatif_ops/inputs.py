"""Load the OSDI'25 artifact's files of one or more jobs into the Store.

Promise: `load_whatif_inputs(paths)` reads the per-operation records and `meta-<trial>.yaml` layouts among
`paths` into `pipeline_ops` (every job) and, for the first job, `steps`, `ranks` and process groups (source
"osdi25_ops"); no `events`. A meta file is read by `read_meta` without a YAML library (flat `key: value` lines
within `MAX_BYTES` / `MAX_KEYS`, never evaluated). Notes name each file not used and why.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perftracker.bounded import read_head, read_text
from perftracker.collectors.whatif_ops.records import read_parquet_ops, read_timeline_ops
from perftracker.errors import InputError
from perftracker.store import LoadNote, RunInfo
from perftracker.store.run_info import ProcessGroup
from perftracker.store.schema import conform

SOURCE = "osdi25_ops"
_COMPUTE = ("forward-compute", "backward-compute", "gc", "optimizer")
_COLLECTIVE = {"forward-send": "send", "backward-send": "send", "forward-recv": "recv", "backward-recv": "recv",
               "params-all-gather": "allgather", "grads-reduce-scatter": "reduce_scatter"}
_STREAM = {"compute": 7, "pp": 21, "dp": 22, "other": 23}
MAX_BYTES = 64 * 1024
MAX_KEYS = 64
_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,63})\s*:\s*(.*?)\s*$")
_PLAIN = re.compile(r"^[A-Za-z0-9_.\-]{0,128}$")
SIZES = ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size")


@dataclass(frozen=True)
class JobLayout:
    """The parallel layout a meta file declares (1 where it says nothing)."""

    trial: str
    dp_size: int = 1
    pp_size: int = 1
    tp_size: int = 1
    dsp_size: int = 1
    vpp_size: int = 1
    world_size: int = 1


def looks_like_meta(path: Path) -> bool:
    if path.suffix.lower() not in (".yaml", ".yml"):
        return False
    head = read_head(path, 4096)
    return b"pp_size" in head or b"dp_size" in head


def read_meta(path: Path) -> tuple[JobLayout | None, list[LoadNote]]:
    """The layout of `path`, or None with a note saying why it cannot be used."""
    try:
        text, capped = read_text(path, MAX_BYTES)
    except (InputError, OSError) as exc:
        return None, [_bad(path, f"cannot be read ({exc})")]
    if capped.left_out:
        return None, [_bad(path, f"is over {MAX_BYTES // 1024} KiB: not a job's meta file")]
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line.strip() == "---":
            continue
        found = _LINE.match(line)
        if found is None or not _PLAIN.match(found.group(2).strip("'\"")):
            return None, [_bad(path, f"line {number} is not a plain `key: value` line (only those are read)")]
        values[found.group(1)] = found.group(2).strip("'\"")
        if len(values) > MAX_KEYS:
            return None, [_bad(path, f"has more than {MAX_KEYS} keys: not a job's meta file")]
    sizes: dict[str, int] = {}
    for key in SIZES:
        if key in values:
            if not values[key].isdigit() or not 0 < int(values[key]) < 1 << 24:
                return None, [_bad(path, f"`{key}: {values[key]}` is not a positive integer")]
            sizes[key] = int(values[key])
    if "pp_size" not in sizes and "dp_size" not in sizes:
        return None, [_bad(path, "names neither dp_size nor pp_size")]
    trial = values.get("trial_name") or path.stem.removeprefix("meta-")
    return JobLayout(trial, **sizes), []


def _bad(path: Path, what: str) -> LoadNote:
    return LoadNote("warning", str(path), f"{path.name} {what}; the job's layout is taken from its records instead")


def trial_of(path: Path) -> str:
    """The trial a file belongs to, by the artifact's names (`trace-AR.parquet` -> AR)."""
    name = path.name
    for suffix in (".json.gz", ".json", ".parquet", ".yaml", ".yml"):
        name = name.removesuffix(suffix)
    for prefix in ("trace-", "timeline-", "meta-"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def is_ideal_timeline(path: Path) -> bool:
    return path.name.startswith("ideal-timeline-")


def load_whatif_inputs(paths: list[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """({"pipeline_ops", "events", "steps", "ranks"}, notes, RunInfo with process groups) of `paths`."""
    notes: list[LoadNote] = []
    by_trial: dict[str, dict[str, Path]] = defaultdict(dict)
    layouts: dict[str, JobLayout] = {}
    for path in paths:
        if is_ideal_timeline(path):
            notes.append(LoadNote("info", str(path), f"{path.name} is the artifact's simulated ideal timeline, not a "
                                  "record of the run: not read (perftracker replays its own ideal)"))
        elif path.suffix.lower() in (".yaml", ".yml"):
            layout, said = read_meta(path)
            notes.extend(said)
            if layout is not None:
                layouts[trial_of(path)] = layout
        elif path.suffix.lower() == ".parquet":
            by_trial[trial_of(path)]["parquet"] = path
        else:
            by_trial[trial_of(path)]["timeline"] = path
    frames = []
    for trial in sorted(by_trial):
        files = by_trial[trial]
        ops = pd.DataFrame()
        if "parquet" in files:
            ops, said = read_parquet_ops(files["parquet"])
            notes.extend(said)
            if not ops.empty and "timeline" in files:
                notes.append(LoadNote("info", str(files["timeline"]), f"{files['timeline'].name} holds the same "
                                      f"records as {files['parquet'].name}: read once, from the Parquet file"))
        if ops.empty and "timeline" in files:
            ops, said = read_timeline_ops(files["timeline"])
            notes.extend(said)
        if ops.empty:
            continue
        layout = layouts.get(trial)
        name = layout.trial if layout is not None else trial
        ops = _fill_ranks(ops, notes, files)
        frames.append(conform("pipeline_ops", ops.assign(job=name)))
    if not frames:
        return {}, notes, RunInfo()
    every = pd.concat(frames, ignore_index=True)
    first = str(frames[0]["job"].iloc[0])
    if len(frames) > 1:
        notes.append(LoadNote("info", ", ".join(sorted(by_trial)), f"{len(frames)} pipeline jobs in one input: the "
                              f"what-if analysis judges each; the per-rank tables hold the first ({first})"))
    ops = every[every["job"] == first]
    layout = layouts.get(trial_of(Path(first))) or layouts.get(first)
    steps, ranks = _per_rank_tables(op_events(ops), layout)
    info = RunInfo(process_groups=_groups(ops, layout))
    return {"pipeline_ops": every, "steps": steps, "ranks": ranks}, notes, info


def _fill_ranks(ops: pd.DataFrame, notes: list[LoadNote], files: dict[str, Path]) -> pd.DataFrame:
    """A global rank per worker where the records name none (the timeline): stage-major worker numbers."""
    missing = ops["rank"].to_numpy() < 0
    if missing.any():
        n_dp = int(ops["dp_rank"].max()) + 1
        ops = ops.copy()
        ops.loc[missing, "rank"] = ops.loc[missing, "stage"] * n_dp + ops.loc[missing, "dp_rank"]
        where = files.get("timeline") or next(iter(files.values()))
        notes.append(LoadNote("info", str(where), f"{where.name} names no global rank: workers are numbered "
                              "stage * DP size + DP rank"))
    return ops


def op_events(ops: pd.DataFrame) -> pd.DataFrame:
    """One job's records as `events` rows (compute / comm, collective, process group), steps laid end to end."""
    end = ops["start_ns"] + ops["dur_ns"]
    span = end.groupby(ops["step"]).max() - ops["start_ns"].groupby(ops["step"]).min().clip(upper=0)
    offset = span.cumsum().shift(1, fill_value=0)
    start = ops["start_ns"].to_numpy(np.int64) + ops["step"].map(offset).to_numpy(np.int64)
    optype = ops["optype"].astype(str)
    is_compute = optype.isin(_COMPUTE).to_numpy()
    family = np.where(is_compute, "compute", np.where(optype.str.contains("send|recv"), "pp",
                                                      np.where(optype.isin(list(_COLLECTIVE)), "dp", "other")))
    pg = np.where(family == "pp", "pp" + ops["dp_rank"].astype(str),
                  np.where(family == "dp", "dp" + ops["stage"].astype(str), ""))
    n_dp = int(ops["dp_rank"].max()) + 1
    size = np.where(family == "pp", 2, np.where(family == "dp", n_dp, -1))
    events = pd.DataFrame({
        "rank": ops["rank"].to_numpy(), "window": 0, "device": 0,
        "stream": pd.Series(family).map(_STREAM).to_numpy(), "tid": 0,
        "kind": np.where(is_compute, "compute", "comm"), "name": optype.to_numpy(),
        "start_ns": start, "dur_ns": ops["dur_ns"].to_numpy(np.int64), "step": ops["step"].to_numpy(),
        "correlation": -1, "external_id": -1,
        "collective": np.where(is_compute, "", optype.map(_COLLECTIVE).fillna("allreduce").to_numpy()),
        "bytes": -1, "pg": pg, "group_size": size.astype(np.int64)})
    return conform("events", events.sort_values(["rank", "start_ns"], kind="stable"))


def _per_rank_tables(events: pd.DataFrame, layout: JobLayout | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """steps and ranks of one job from its `op_events`."""
    events = events.assign(end=events["start_ns"] + events["dur_ns"])
    steps = events.groupby(["rank", "step"]).agg(start_ns=("start_ns", "min"), end=("end", "max")).reset_index()
    steps = steps.assign(dur_ns=steps["end"] - steps["start_ns"], window=0, source="ops").drop(columns="end")
    ranks = events.groupby("rank").agg(start_ns=("start_ns", "min"), end_ns=("end", "max"),
                                       n_events=("name", "size")).reset_index()
    world = layout.world_size if layout is not None else len(ranks)
    ranks = ranks.assign(window=0, host="", file="", world_size=world, backend="", device_name="", base_ns=-1)
    return conform("steps", steps), conform("ranks", ranks)


def _groups(ops: pd.DataFrame, layout: JobLayout | None) -> dict[str, ProcessGroup]:
    """DP groups (one per stage), PP groups (one per replica) and, where the meta declares TP > 1, a TP group
    per worker whose member ranks the records do not list."""
    workers = ops[["dp_rank", "stage", "rank"]].drop_duplicates(["dp_rank", "stage"]).astype(int)
    out: dict[str, ProcessGroup] = {}
    for by, within, desc in (("stage", "dp_rank", "DP"), ("dp_rank", "stage", "PP")):
        for key, rows in workers.groupby(by):
            ranks = tuple(int(r) for r in rows.sort_values(within)["rank"])
            name = f"{desc.lower()}{key}"
            out[name] = ProcessGroup(name, desc, len(ranks), ranks, SOURCE)
    if layout is not None and layout.tp_size > 1:
        for rank in workers["rank"]:
            out[f"tp{rank}"] = ProcessGroup(f"tp{rank}", "TP", layout.tp_size, (), SOURCE)
    return out
